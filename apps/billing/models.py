"""Per-minute bill lines of public (pay-as-you-go) and spot pods, and each pod's meter.

Quota jobs are prepaid and never produce bill lines.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

PAY_TYPE_TAG = "acs:pai:dlc:payType"


def pay_type_tag(pay_type: str) -> str:
    """The `acs:pai:dlc:payType` tag of a pay type: "acs:pai:dlc:payType=spot"."""
    return f"{PAY_TYPE_TAG}={pay_type}"


class PayType(models.TextChoices):
    SPOT = "spot", _("Spot")
    POSTPAID = "postpaid", _("Pay-as-you-go")


class BillLine(models.Model):
    """One instance-minute of one pod. (pod, minute) is unique: billing the same minute
    twice inserts nothing."""

    workspace = models.ForeignKey(
        "workspaces.Workspace",
        on_delete=models.PROTECT,
        related_name="bill_lines",
        verbose_name=_("workspace"),
    )
    job = models.ForeignKey(
        "jobs.Job", on_delete=models.CASCADE, related_name="bill_lines", verbose_name=_("job")
    )
    pod = models.ForeignKey(
        "jobs.Pod", on_delete=models.CASCADE, related_name="bill_lines", verbose_name=_("pod")
    )
    minute = models.IntegerField(_("minute"), help_text=_("epoch minute: seconds since 1970 // 60"))
    day = models.DateField(_("day"), help_text=_("UTC day of the minute"))
    instance_type = models.ForeignKey(
        "cluster.InstanceType", on_delete=models.PROTECT, verbose_name=_("Instance type")
    )
    price_per_hour = models.DecimalField(_("price per hour"), max_digits=12, decimal_places=4)
    amount = models.DecimalField(_("amount"), max_digits=14, decimal_places=6, help_text=_("CNY"))
    pay_type = models.CharField(_("pay type"), max_length=8, choices=PayType.choices)

    class Meta:
        verbose_name = _("bill line")
        verbose_name_plural = _("bill lines")
        constraints = [
            models.UniqueConstraint(fields=["pod", "minute"], name="one_bill_line_per_pod_minute"),
        ]
        indexes = [
            models.Index(fields=["workspace", "day"]),
            models.Index(fields=["job", "day"]),
        ]

    def __str__(self) -> str:
        return f"{self.pod_id} minute {self.minute}: ¥{self.amount}"

    @property
    def tag(self) -> str:
        return pay_type_tag(self.pay_type)


class BillDay(models.Model):
    """A pod's bill lines of one UTC day, summed: what the Bills page, a job's cost and the
    export read, so that they cost what the pods and days do, not every minute ever billed.
    `billing_accrue` adds each line it inserts to its day in the same transaction."""

    workspace = models.ForeignKey(
        "workspaces.Workspace",
        on_delete=models.PROTECT,
        related_name="bill_days",
        verbose_name=_("workspace"),
    )
    job = models.ForeignKey(
        "jobs.Job", on_delete=models.CASCADE, related_name="bill_days", verbose_name=_("job")
    )
    pod = models.ForeignKey(
        "jobs.Pod", on_delete=models.CASCADE, related_name="bill_days", verbose_name=_("pod")
    )
    day = models.DateField(_("day"), help_text=_("UTC day"))
    instance_type = models.ForeignKey(
        "cluster.InstanceType", on_delete=models.PROTECT, verbose_name=_("Instance type")
    )
    pay_type = models.CharField(_("pay type"), max_length=8, choices=PayType.choices)
    minutes = models.PositiveIntegerField(_("minutes"), help_text=_("bill lines"))
    amount = models.DecimalField(_("amount"), max_digits=16, decimal_places=6, help_text=_("CNY"))
    first_minute = models.IntegerField(
        _("first minute"), help_text=_("epoch minute: seconds since 1970 // 60")
    )
    last_minute = models.IntegerField(
        _("last minute"), help_text=_("epoch minute: seconds since 1970 // 60")
    )
    low = models.DecimalField(_("lowest price per hour"), max_digits=12, decimal_places=4)
    high = models.DecimalField(_("highest price per hour"), max_digits=12, decimal_places=4)

    class Meta:
        verbose_name = _("bill day")
        verbose_name_plural = _("bill days")
        constraints = [
            models.UniqueConstraint(
                fields=["pod", "day", "instance_type", "pay_type"], name="one_bill_day_per_pod"
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "day"]),
            models.Index(fields=["job", "day"]),
        ]

    def __str__(self) -> str:
        return f"{self.pod_id} on {self.day}: ¥{self.amount}"


class PodMeter(models.Model):
    """How far a pod of a public or spot job has been billed: every minute before
    `billed_until` (an epoch minute) is. Closed once the pod has ended and is fully billed."""

    pod = models.OneToOneField(
        "jobs.Pod",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="meter",
        verbose_name=_("pod"),
    )
    billed_until = models.IntegerField(_("billed until"), null=True, blank=True)
    closed = models.BooleanField(_("closed"), default=False)

    class Meta:
        verbose_name = _("pod meter")
        verbose_name_plural = _("pod meters")
        indexes = [
            models.Index(fields=["closed"], condition=Q(closed=False), name="pod_meter_open"),
        ]

    def __str__(self) -> str:
        return f"meter of {self.pod_id}"
