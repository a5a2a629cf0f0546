"""The spot market's state: the current price per instance type, and price history (its tuning,
`MarketParameters`, is declared with the cluster: apps/cluster/models.py).

Prices are CNY per instance-HOUR on the 0.0001 grid of `apps.core.pricing`.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.core import pricing


class MarketState(models.Model):
    """An instance type's market price now, and when the market last moved it."""

    instance_type = models.OneToOneField(
        "cluster.InstanceType",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="market_state",
        verbose_name=_("Instance type"),
    )
    price_per_hour = models.DecimalField(_("price per hour"), max_digits=12, decimal_places=4)
    average_per_hour = models.DecimalField(
        _("average per hour"),
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        help_text=_("Lingjun: the system average price the tick held running jobs to"),
    )
    asked_per_hour = models.DecimalField(
        _("asked per hour"),
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        help_text=_("what a bid must cover to start: the price, or a higher system average"),
    )
    free = models.PositiveIntegerField(
        _("spot stock"),
        default=0,
        help_text=_("instances left for spot after the tick (spot stock)"),
    )
    headroom = models.PositiveIntegerField(
        _("headroom"),
        null=True,
        blank=True,
        help_text=_("the most instances a bidding job could get in the tick; none: no bound"),
    )
    stepped_at = models.DateTimeField(
        _("stepped at"), help_text=_("the market tick that set the price")
    )
    recorded_at = models.DateTimeField(
        _("recorded at"), help_text=_("when the last PricePoint was written")
    )

    class Meta:
        verbose_name = _("market state")
        verbose_name_plural = _("market states")

    def __str__(self) -> str:
        return f"{self.instance_type_id}: ¥{self.price_per_hour}/h"

    def quote(self) -> pricing.Quote:
        """The type as a bidder sees it after the tick (see `pricing.spot_wait_reason`)."""
        if self.asked_per_hour is None:  # written before asked prices were kept
            return pricing.Quote(self.price_per_hour, "market", self.free)
        name = "market" if self.asked_per_hour == self.price_per_hour else "system average"
        return pricing.Quote(self.asked_per_hour, name, self.free)


class PricePoint(models.Model):
    """A market price in force from `at` until the type's next point (a step function)."""

    instance_type = models.ForeignKey(
        "cluster.InstanceType",
        on_delete=models.CASCADE,
        related_name="price_points",
        verbose_name=_("Instance type"),
    )
    at = models.DateTimeField(_("at"))
    price_per_hour = models.DecimalField(_("price per hour"), max_digits=12, decimal_places=4)

    class Meta:
        verbose_name = _("price point")
        verbose_name_plural = _("price points")
        constraints = [
            # Also the (instance_type, at) index every history read uses.
            models.UniqueConstraint(fields=["instance_type", "at"], name="price_point_type_at"),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type_id} @ {self.at:%Y-%m-%d %H:%M:%S}: ¥{self.price_per_hour}/h"
