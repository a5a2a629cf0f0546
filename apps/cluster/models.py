"""The cluster: instance types, resource pools and their nodes, the quota tree, the images
the create form suggests, and the spot market's parameters (all declared by the cluster
file).

Units everywhere: CPU in millicores, memory in MiB, GPUs as a count; money is Decimal
CNY, prices per instance-hour.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from apps.cluster.signals import original_price_changed
from apps.core import pricing
from apps.core.limits import MAX_NODE_GPUS


class ResourceType(models.TextChoices):
    ECS = "ECS", _("General computing (ECS)")
    LINGJUN = "Lingjun", _("Lingjun (high-performance AI)")


class InstanceType(models.Model):
    """An EcsSpec such as ecs.g7.xlarge, with its pay-as-you-go (original) price."""

    name = models.CharField(_("name"), max_length=64, unique=True)
    resource_type = models.CharField(
        _("Resource type"), max_length=16, choices=ResourceType.choices
    )
    cpu = models.PositiveIntegerField(_("CPU"), help_text=_("millicores"))
    memory = models.PositiveIntegerField(_("Memory"), help_text=_("MiB"))
    gpu = models.PositiveIntegerField(
        _("GPUs"), default=0, validators=[MaxValueValidator(MAX_NODE_GPUS)]
    )
    gpu_model = models.CharField(_("GPU model"), max_length=64, blank=True)
    price_per_hour = models.DecimalField(
        _("price per hour"),
        max_digits=12,
        decimal_places=4,
        validators=[MinValueValidator(0)],
        help_text=_("original (pay-as-you-go) price, CNY per instance-hour"),
    )
    public_capacity = models.PositiveIntegerField(
        _("public capacity"),
        default=0,
        help_text=_("instances in the public pool (pay-as-you-go and spot)"),
    )
    spot_enabled = models.BooleanField(_("sold as spot"), default=True)

    class Meta:
        verbose_name = _("instance type")
        verbose_name_plural = _("instance types")
        ordering = ["resource_type", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(price_per_hour__gte=0), name="instance_price_ge_0"),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        """Save, and record the original price in its history when it changed (whoever
        saves: the Django admin, the cluster file): a minute is billed at the price in
        force at its start, so a change must not reach back to minutes run before it."""
        super().save(*args, **kwargs)
        fields = kwargs.get("update_fields")
        if fields is None or "price_per_hour" in fields:
            original_price_record(self, at=timezone.now())

    @property
    def vcpus(self) -> float:
        return self.cpu / 1000

    @property
    def memory_gib(self) -> float:
        return self.memory / 1024


class OriginalPrice(models.Model):
    """An instance type's original (pay-as-you-go) price in force from `at` until the type's
    next change (a step function). The first change recorded holds from the start: a type's
    price before it was first recorded is the one first recorded."""

    instance_type = models.ForeignKey(
        InstanceType,
        on_delete=models.CASCADE,
        related_name="original_prices",
        verbose_name=_("Instance type"),
    )
    at = models.DateTimeField(_("at"))
    price_per_hour = models.DecimalField(_("price per hour"), max_digits=12, decimal_places=4)

    class Meta:
        verbose_name = _("original price change")
        verbose_name_plural = _("original price changes")
        constraints = [
            models.UniqueConstraint(fields=["instance_type", "at"], name="original_price_type_at"),
        ]

    def __str__(self) -> str:
        name = self.instance_type.name  # the admin titles each row of a type's history by it
        return f"{name} @ {self.at:%Y-%m-%d %H:%M:%S}: ¥{self.price_per_hour}/h"


def original_price_record(instance_type: InstanceType, *, at) -> None:
    """Record the type's original price as in force from `at` if it differs from the last
    one recorded, and announce the change (`original_price_changed`: the market moves the
    type's market price with it)."""
    new = Decimal(instance_type.price_per_hour)
    last = instance_type.original_prices.order_by("-at").first()
    if last is not None and last.price_per_hour == new:
        return
    OriginalPrice.objects.update_or_create(
        instance_type=instance_type, at=at, defaults={"price_per_hour": new}
    )
    old = None if last is None else last.price_per_hour
    original_price_changed.send(
        sender=InstanceType, instance_type_id=instance_type.pk, old=old, new=new, at=at
    )


class ResourcePool(models.Model):
    class Kind(models.TextChoices):
        DEDICATED = "dedicated", _("Dedicated (subscription, behind quotas)")
        PUBLIC = "public", _("Public (pay-as-you-go and spot)")

    name = models.SlugField(_("name"), max_length=64, unique=True)
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices)
    resource_type = models.CharField(
        _("Resource type"), max_length=16, choices=ResourceType.choices
    )

    class Meta:
        verbose_name = _("resource pool")
        verbose_name_plural = _("resource pools")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    class Status(models.TextChoices):
        READY = "Ready", _("Ready")
        CORDONED = "Cordoned", _("Cordoned")
        DRAINING = "Draining", _("Draining")  # Cordoned once its jobs are moved off
        LOST = "Lost", _("Lost")

    name = models.CharField(_("name"), max_length=128, unique=True)
    pool = models.ForeignKey(
        ResourcePool,
        on_delete=models.PROTECT,
        related_name="nodes",
        verbose_name=_("resource pool"),
    )
    instance_type = models.ForeignKey(
        InstanceType,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="nodes",
        verbose_name=_("Instance type"),
    )
    cpu = models.PositiveIntegerField(_("CPU"), help_text=_("millicores"))
    memory = models.PositiveIntegerField(_("Memory"), help_text=_("MiB"))
    gpu = models.PositiveIntegerField(
        _("GPUs"), default=0, validators=[MaxValueValidator(MAX_NODE_GPUS)]
    )
    gpu_model = models.CharField(_("GPU model"), max_length=64, blank=True)
    status = models.CharField(
        _("Status"), max_length=16, choices=Status.choices, default=Status.READY
    )
    last_heartbeat = models.DateTimeField(_("last heartbeat"), null=True, blank=True)
    # Reported with each heartbeat: when its agent's last watch round that looked at every
    # pod it runs began (every pod ended before then has had its end reported). A running
    # pod is billed no further (`apps.jobs.execution.pods_vouched_until`). Null: its agent
    # does not report rounds (one from before), and its heartbeat alone bounds.
    pods_watched_at = models.DateTimeField(
        _("pods watched at"),
        null=True,
        blank=True,
        help_text=_("the start of its agent's last watch round over every pod it runs"),
    )
    # When the watchdog found it silent, whatever its status (a Cordoned or Draining one
    # stays so): its processes are gone as far as anyone knows until its agent answers.
    lost_at = models.DateTimeField(_("found silent at"), null=True, blank=True)

    class Meta:
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        ordering = ["pool__name", "name"]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """A node of the quota tree: guarantees `min` of its pool to the workspaces it serves.

    A child's usage counts toward every ancestor, so the children's `min` may not exceed the
    parent's, and the roots' together may not exceed their pool.
    """

    class Strategy(models.TextChoices):
        STRICT_FIFO = "StrictFIFO", _("StrictFIFO (the head blocks)")
        BEST_EFFORT_FIFO = "BestEffortFIFO", _("BestEffortFIFO (skip a head that cannot fit)")

    name = models.SlugField(_("name"), max_length=64, unique=True)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        verbose_name=_("parent quota"),
    )
    pool = models.ForeignKey(
        ResourcePool,
        on_delete=models.PROTECT,
        related_name="quotas",
        verbose_name=_("resource pool"),
    )
    resource_type = models.CharField(
        _("Resource type"), max_length=16, choices=ResourceType.choices
    )
    min_cpu = models.PositiveIntegerField(_("min CPU"), default=0, help_text=_("millicores"))
    min_memory = models.PositiveIntegerField(_("min memory"), default=0, help_text=_("MiB"))
    min_gpu = models.PositiveIntegerField(_("min GPUs"), default=0)
    queue_strategy = models.CharField(
        _("queue strategy"), max_length=16, choices=Strategy.choices, default=Strategy.STRICT_FIFO
    )
    workspaces = models.ManyToManyField(
        "workspaces.Workspace", blank=True, related_name="quotas", verbose_name=_("workspaces")
    )

    class Meta:
        verbose_name = _("quota")
        verbose_name_plural = _("quotas")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def ancestors(self) -> list[Quota]:
        """Parent first, root last."""
        chain, node = [], self.parent
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain


class Image(models.Model):
    """An image the create form suggests for a job or a role (a job may name any other)."""

    name = models.CharField(_("name"), max_length=64, unique=True)
    uri = models.CharField(_("URI"), max_length=512, help_text=_("what a job's image field takes"))
    description = models.CharField(_("Description"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("image")
        verbose_name_plural = _("images")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


_MARKET_DEFAULTS = pricing.MarketParams()


class MarketParameters(models.Model):
    """The market's tuning: a single row (pk 1), edited in the admin or by the cluster file
    through `market_params_set`. Defaults are `pricing.MarketParams()`."""

    floor_ratio = models.DecimalField(
        _("floor ratio"),
        max_digits=4,
        decimal_places=3,
        default=_MARKET_DEFAULTS.floor_ratio,
        validators=[MinValueValidator(Decimal("0.001")), MaxValueValidator(Decimal(1))],
        help_text=_("floor = this share of the original price (0.1: a saving of up to 90%)"),
    )
    smoothing = models.FloatField(
        _("smoothing"),
        default=_MARKET_DEFAULTS.smoothing,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text=_("share of the gap to the demand target closed per tick"),
    )
    volatility = models.FloatField(
        _("volatility"),
        default=_MARKET_DEFAULTS.volatility,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text=_("seeded random part of each move, relative to the price"),
    )
    sensitivity = models.FloatField(
        _("sensitivity"),
        default=_MARKET_DEFAULTS.sensitivity,
        validators=[MinValueValidator(0)],
        help_text=_("how strongly demand against supply moves the target"),
    )
    average_window_seconds = models.FloatField(
        _("average window (seconds)"),
        default=_MARKET_DEFAULTS.average_window_seconds,
        validators=[MinValueValidator(1)],
        help_text=_("window of Lingjun's system average price"),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        db_table = "market_marketparameters"  # the market app's table, from before the move
        verbose_name = verbose_name_plural = _("market parameters")

    def __str__(self) -> str:
        return gettext("Market parameters")

    def save(self, *args, **kwargs) -> None:
        self.pk = 1  # a singleton: every save writes the one row
        super().save(*args, **kwargs)

    @classmethod
    def load(cls) -> MarketParameters:
        return cls.objects.get_or_create(pk=1)[0]

    def to_params(self) -> pricing.MarketParams:
        return pricing.MarketParams(
            floor_ratio=Decimal(self.floor_ratio),
            smoothing=self.smoothing,
            volatility=self.volatility,
            sensitivity=self.sensitivity,
            average_window_seconds=self.average_window_seconds,
        )
