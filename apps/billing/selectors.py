"""Reads of the bills: a job's cost so far, daily bills per workspace and per job (with the
`acs:pai:dlc:payType` tag filter), the CSV export, and a quota job's usage.

A day's bill is complete once the next UTC day has begun; until then it is open (it grows
as billing runs). Every read is scoped to a workspace the user is a member of.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.billing.models import PAY_TYPE_TAG, BillDay, PayType, pay_type_tag
from apps.jobs.models import Job, Pod, ResourceSource
from apps.workspaces.models import Workspace
from apps.workspaces.selectors import workspace_list

ZERO = Decimal("0")
MONEY = Decimal("0.000001")  # bill amounts are on this grid
PRICE = Decimal("0.0001")  # and prices per hour on this one (BillDay.low, .high)


def _money(value) -> Decimal:
    """A summed amount back on the grid (SQLite sums decimals as floats)."""
    return ZERO.quantize(MONEY) if value is None else Decimal(value).quantize(MONEY)


CSV_HEADER = (
    "day",
    "workspace",
    "job_id",
    "job_name",
    "pod",
    "instance_type",
    f"tag:{PAY_TYPE_TAG}",
    "minutes",
    "amount",
)


def utc_today(now: datetime | None = None) -> date:
    return (now or timezone.now()).astimezone(UTC).date()


def day_is_complete(day: date, *, now: datetime | None = None) -> bool:
    """A day's bill is complete once the next UTC day has begun."""
    return day < utc_today(now)


def _days_for(*, user, workspace: Workspace | None, pay_type: str = "") -> QuerySet[BillDay]:
    """The bill days (a pod's lines of a day, summed) of `workspace`, if `user` is a member;
    filtered by the payType tag."""
    if workspace is None or not workspace_list(user=user).filter(pk=workspace.pk).exists():
        return BillDay.objects.none()
    days = BillDay.objects.filter(workspace=workspace)
    if pay_type in PayType.values:
        days = days.filter(pay_type=pay_type)
    return days


# --- a job ---------------------------------------------------------------------------------


def job_cost(*, job: Job) -> Decimal:
    """What the job has cost so far (CNY): its billed minutes. Zero for quota jobs."""
    return _money(BillDay.objects.filter(job=job).aggregate(total=Sum("amount"))["total"])


@dataclass(frozen=True)
class JobUsage:
    """The job page's cost box: billed cost for pay-as-you-go and spot jobs, resource use
    (GPU-hours, instance-hours) for every job — for prepaid quota jobs, that is all."""

    prepaid: bool
    pay_type: str  # spot | postpaid | "" for quota jobs
    cost: Decimal
    billed_minutes: int
    gpu_hours: float
    instance_hours: float


def job_usage(*, job: Job, now: datetime | None = None) -> JobUsage:
    now = now or timezone.now()
    gpu_seconds = instance_seconds = 0.0
    for started, finished, gpu, milli in Pod.objects.filter(
        job=job, started_at__isnull=False
    ).values_list("started_at", "finished_at", "role__gpu", "role__gpu_milli"):
        seconds = max(((finished or now) - started).total_seconds(), 0.0)
        instance_seconds += seconds
        gpu_seconds += seconds * (milli / 1000 if milli else gpu)
    billed = BillDay.objects.filter(job=job).aggregate(n=Sum("minutes"), total=Sum("amount"))
    prepaid = job.resource_source == ResourceSource.QUOTA
    return JobUsage(
        prepaid=prepaid,
        pay_type="" if prepaid else (PayType.SPOT if job.is_spot else PayType.POSTPAID),
        cost=_money(billed["total"]),
        billed_minutes=billed["n"] or 0,
        gpu_hours=gpu_seconds / 3600,
        instance_hours=instance_seconds / 3600,
    )


@dataclass(frozen=True)
class JobBillLine:
    """A pod's billed minutes on one UTC day (one instance type, one pay type)."""

    day: date
    pod_id: str
    instance_type: str
    pay_type: str
    minutes: int
    amount: Decimal
    start: datetime  # the first billed minute's start
    end: datetime  # the last billed minute's end
    low: Decimal  # the cheapest price per hour billed
    high: Decimal  # the dearest

    @property
    def tag(self) -> str:
        return pay_type_tag(self.pay_type)


def job_bill_lines(*, job: Job, number: int = 1, size: int = 100) -> tuple[int, list[JobBillLine]]:
    """Page `number` (of `size`) of the job's bill lines per (UTC day, pod, instance type,
    pay type), oldest first, and how many there are in all."""
    rows = (
        BillDay.objects.filter(job=job)
        .values(
            "day",
            "pod__pod_id",
            "instance_type__name",
            "pay_type",
            "minutes",
            "amount",
            "low",
            "high",
            first=F("first_minute"),
            last=F("last_minute"),
        )
        .order_by("day", "pod__pod_id", "instance_type__name", "pay_type")
    )
    page = [
        JobBillLine(
            day=r["day"],
            pod_id=r["pod__pod_id"],
            instance_type=r["instance_type__name"],
            pay_type=r["pay_type"],
            minutes=r["minutes"],
            amount=_money(r["amount"]),
            start=datetime.fromtimestamp(r["first"] * 60, UTC),
            end=datetime.fromtimestamp((r["last"] + 1) * 60, UTC),
            low=Decimal(r["low"]).quantize(PRICE),
            high=Decimal(r["high"]).quantize(PRICE),
        )
        for r in rows[(number - 1) * size : number * size]
    ]
    return rows.count(), page


# --- daily bills -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DailyBill:
    """One UTC day of a workspace: spot and pay-as-you-go amounts."""

    day: date
    spot: Decimal
    postpaid: Decimal
    minutes: int
    complete: bool

    @property
    def total(self) -> Decimal:
        return self.spot + self.postpaid


def workspace_daily_bills(
    *, user, workspace: Workspace | None, pay_type: str = "", now: datetime | None = None
) -> list[DailyBill]:
    """The workspace's bill per day, newest first."""
    rows = (
        _days_for(user=user, workspace=workspace, pay_type=pay_type)
        .values("day")
        .annotate(
            spot=Coalesce(Sum("amount", filter=Q(pay_type=PayType.SPOT)), ZERO),
            postpaid=Coalesce(Sum("amount", filter=Q(pay_type=PayType.POSTPAID)), ZERO),
            lines=Sum("minutes"),
        )
        .order_by("-day")
    )
    return [
        DailyBill(
            day=r["day"],
            spot=_money(r["spot"]),
            postpaid=_money(r["postpaid"]),
            minutes=r["lines"],
            complete=day_is_complete(r["day"], now=now),
        )
        for r in rows
    ]


def job_daily_bills(*, user, workspace: Workspace | None, pay_type: str = "") -> QuerySet:
    """Per (day, job): minutes and amount, newest day first. Rows are dicts with day,
    job, job_id, job_name, pay_type, pods, instance_minutes, amount; paginate it."""
    return (
        _days_for(user=user, workspace=workspace, pay_type=pay_type)
        .values("day", "job", "pay_type")
        .annotate(
            job_id=F("job__job_id"),
            job_name=F("job__display_name"),
            pods=Count("pod", distinct=True),
            instance_minutes=Sum("minutes"),
            amount=Sum("amount"),
        )
        .order_by("-day", "job_name", "job")
    )


def bill_export_rows(*, user, workspace: Workspace | None, pay_type: str = "") -> Iterator[tuple]:
    """The CSV export: CSV_HEADER, then one row per (day, pod), oldest day first."""
    yield CSV_HEADER
    rows = (
        _days_for(user=user, workspace=workspace, pay_type=pay_type)
        .values_list(
            "day",
            "workspace__name",
            "job__job_id",
            "job__display_name",
            "pod__pod_id",
            "instance_type__name",
            "pay_type",
            "minutes",
            "amount",
        )
        .order_by("day", "job__job_id", "pod__pod_id", "instance_type__name", "pay_type")
    )
    for day, ws, job_id, name, pod, itype, pay, minutes, amount in rows.iterator(chunk_size=2000):
        yield (day.isoformat(), ws, job_id, name, pod, itype, pay, minutes, f"{_money(amount)}")
