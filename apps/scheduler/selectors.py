"""Reads for the quota page: each quota's guarantee, its In Quota use, what its subtree
borrows, what of its idle guarantee is lent out, and to whom (the rule: `engine.lending`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import F, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy

from apps.cluster.models import Node, Quota, ResourcePool, ResourceType
from apps.core.charts import Chart, chart_build
from apps.jobs.models import Job, JobRole, Pod, PodStatus, ResourceSource, gpu_text
from apps.scheduler import engine
from apps.scheduler.engine.model import MILLI
from apps.scheduler.engine.vectors import Vec, add

NONE: Vec = (0, 0, 0)
BORROWERS_SHOWN = 5  # borrowing jobs named per quota on the quotas page, newest first

# A pod holds its node's resources while it runs, and from the moment it is placed.
HOLDING = Q(status=PodStatus.RUNNING) | Q(status=PodStatus.PENDING, node__isnull=False)
_SUMS = {
    "cpu": Sum("role__cpu"),
    "memory": Sum("role__memory"),
    "gpu": Sum(F("role__gpu") * 1000 + F("role__gpu_milli")),  # milli-GPUs: shares count
}


@dataclass(frozen=True)
class Usage:
    """One resource of one quota row: amounts in millicores, MiB and milli-GPUs (a pod on a
    share of a GPU uses its part of the quota)."""

    resource: str
    min: int
    used: int  # In Quota
    borrowed: int  # Not in Quota, by this subtree's jobs
    lent: int  # of this quota's idle guarantee, what borrowers may be sitting on
    own: int = 0  # of `lent`, what its own jobs run on (Not in Quota, on its free min)

    @property
    def percent(self) -> int:
        """Use as a share of min, for the bar (0–100; a zero min shows 0, or 100 if used)."""
        if self.min == 0:
            return 100 if self.used else 0
        return min(100, round(100 * self.used / self.min))

    @property
    def over(self) -> bool:
        return self.used > self.min

    @property
    def unit(self) -> str:
        return {"cpu": "cores", "memory": "GiB", "gpu": "GPU"}[self.resource]

    def show(self, amount: int) -> str:
        """In the page's units: cores and GiB (one decimal at most), GPUs (a share: 0.25)."""
        if self.resource == "cpu":
            return _trim(amount / 1000)
        if self.resource == "memory":
            return _trim(amount / 1024)
        return f"{amount / 1000:g}"

    @property
    def min_text(self) -> str:
        return self.show(self.min)

    @property
    def used_text(self) -> str:
        return self.show(self.used)

    @property
    def borrowed_text(self) -> str:
        return self.show(self.borrowed)

    @property
    def lent_text(self) -> str:
        return self.show(self.lent)

    @property
    def own_text(self) -> str:
        return self.show(self.own)


@dataclass(frozen=True)
class QuotaRow:
    quota: Quota
    depth: int
    workspaces: list[str]
    gpu: Usage
    cpu: Usage
    memory: Usage

    @property
    def usages(self) -> list[Usage]:
        return [self.gpu, self.cpu, self.memory]

    @property
    def runs_on_own(self) -> bool:
        """Its own idle-resource jobs run on part of its free guarantee (see `LoanRow.own`)."""
        return any(u.own for u in self.usages)


@dataclass
class LoanRow:
    """Idle room that one quota's jobs use on another's free guarantee (or on capacity no
    quota guarantees: `lender` None), as `engine.lending` attributes it."""

    borrower: Quota
    lender: Quota | None
    gpu: Usage
    cpu: Usage
    memory: Usage
    jobs: list[Job] = field(default_factory=list)  # on a borrower's first row: its borrowers
    more: int = 0  # how many more of its jobs borrow than `jobs` lists

    @property
    def usages(self) -> list[Usage]:
        return [self.gpu, self.cpu, self.memory]

    @property
    def own(self) -> bool:
        """The borrower's jobs run on its own free guarantee: `engine.lending` attributes idle
        room to every free guarantee of the pool, the borrower's too (idle-resource jobs use
        idle resources "of the current or other quotas"). Not a loan from anyone: the page
        says "its own idle guarantee"."""
        return self.lender is not None and self.lender.pk == self.borrower.pk


@dataclass(frozen=True)
class PoolLending:
    pool: ResourcePool
    loans: list[LoanRow]  # by borrower, then lender (unguaranteed capacity first)


def quota_usage_rows() -> dict[str, list[QuotaRow]]:
    """Rows of the quota tree per resource type (parents before children), with usage."""
    return quota_page()[0]


def quota_page() -> tuple[dict[str, list[QuotaRow]], list[PoolLending]]:
    """Rows of the quota tree per resource type (parents before children), with usage, and
    per pool who borrows from whom.

    - used: resources held (Running, or Pending on a node) by In Quota pods of jobs of the
      quota or any quota below it — a child's usage counts toward every ancestor.
    - borrowed: the same for Not in Quota pods of those jobs (idle capacity they run on).
    - lent, loans: the scheduler core's attribution of idle room to the free guarantees
      (`engine.lending`, the one rule): unguaranteed capacity first, then the quotas' free
      min in proportion.
    A few queries whatever the size of the tree: quotas, their workspaces, two sums, the
    pools' capacity and the borrowing jobs.
    """
    quotas = list(Quota.objects.select_related("pool").prefetch_related("workspaces"))
    by_id = {q.pk: q for q in quotas}
    used: dict[int, Vec] = {}
    borrowed: dict[tuple[int, int], Vec] = {}
    for row in (
        Pod.objects.filter(HOLDING, job__quota__isnull=False, in_quota=True)
        .values("job__quota_id")
        .annotate(**_SUMS)
    ):
        used[row["job__quota_id"]] = _vec(row)
    for row in (
        Pod.objects.filter(HOLDING, job__quota__isnull=False, in_quota=False, node__isnull=False)
        .values("job__quota_id", "node__pool_id")
        .annotate(**_SUMS)
    ):
        borrowed[(row["job__quota_id"], row["node__pool_id"])] = _vec(row)
    capacity = {
        row["pool_id"]: (row["gpu"] * MILLI, row["cpu"], row["memory"])
        for row in Node.objects.filter(
            status=Node.Status.READY, pool__kind=ResourcePool.Kind.DEDICATED
        )
        .values("pool_id")
        .annotate(gpu=Sum("gpu"), cpu=Sum("cpu"), memory=Sum("memory"))
    }
    result = engine.lending(
        [quota_core(q) for q in quotas], used=used, borrowed=borrowed, capacity=capacity
    )
    own: dict[int, Vec] = {}
    for loan in result.loans:
        if loan.lender == loan.borrower:
            own[loan.borrower] = add(own.get(loan.borrower, NONE), loan.amount)

    children: dict[int | None, list[Quota]] = {}
    for q in quotas:
        children.setdefault(q.parent_id, []).append(q)
    rows: dict[str, list[QuotaRow]] = {rt: [] for rt in ResourceType.values}

    def emit(q: Quota, depth: int) -> None:
        report = result.quotas[q.pk]
        usage = {
            r: Usage(
                resource=r,
                min=report.min[i],
                used=report.used[i],
                borrowed=report.borrowed[i],
                lent=report.lent[i],
                own=own.get(q.pk, NONE)[i],
            )
            for i, r in enumerate(("gpu", "cpu", "memory"))
        }
        rows.setdefault(q.resource_type, []).append(
            QuotaRow(
                quota=q,
                depth=depth,
                workspaces=[w.name for w in q.workspaces.all()],
                **usage,
            )
        )
        for child in children.get(q.pk, []):
            emit(child, depth + 1)

    for root in children.get(None, []):
        emit(root, 0)

    pools: dict[int, PoolLending] = {}
    for loan in result.loans:
        borrower = by_id[loan.borrower]
        pool = pools.get(loan.pool_id)
        if pool is None:
            pool = pools[loan.pool_id] = PoolLending(borrower.pool, [])
        pool.loans.append(
            LoanRow(
                borrower=borrower,
                lender=by_id.get(loan.lender) if loan.lender is not None else None,
                **{
                    r: Usage(resource=r, min=0, used=loan.amount[i], borrowed=0, lent=0)
                    for i, r in enumerate(("gpu", "cpu", "memory"))
                },
            )
        )
    for pool in pools.values():
        pool.loans.sort(
            # per borrower: capacity no quota guarantees, its own free guarantee, the others
            key=lambda row: (
                row.borrower.name,
                row.lender is not None,
                not row.own,
                str(row.lender),
            )
        )
        first: dict[int, LoanRow] = {}
        for row in pool.loans:
            first.setdefault(row.borrower.pk, row)
        for quota_id, row in first.items():
            jobs = Job.objects.filter(
                quota_id=quota_id,
                pods__in=Pod.objects.filter(HOLDING, in_quota=False, node__pool=pool.pool),
            ).distinct()
            row.jobs = list(jobs.order_by("-created_at")[:BORROWERS_SHOWN])
            if len(row.jobs) == BORROWERS_SHOWN:
                row.more = jobs.count() - BORROWERS_SHOWN
    ordered = sorted(pools.values(), key=lambda p: p.pool.name)
    return {rt: r for rt, r in rows.items() if r}, ordered


def quota_core(q: Quota) -> engine.Quota:
    """A quota row as the scheduler's core reads it."""
    return engine.Quota(
        id=q.pk,
        name=q.name,
        parent_id=q.parent_id,
        pool_id=q.pool_id,
        min=engine.Resources(cpu=q.min_cpu, memory=q.min_memory, gpu=q.min_gpu),
    )


def _vec(row: dict) -> Vec:
    return (row["gpu"] or 0, row["cpu"] or 0, row["memory"] or 0)


def _trim(number: float) -> str:
    return f"{number:.1f}".removesuffix(".0")


# --- a quota's use over time (the core's `use_over_time`, drawn by core/charts.py) ---------

HISTORY_WINDOWS = {
    "6h": timedelta(hours=6),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
}
RESOURCES = {  # resource → (label, pod amount in the quota's units, one unit of the chart)
    "gpu": (gettext_lazy("GPU"), F("role__gpu") * 1000 + F("role__gpu_milli"), MILLI),
    "cpu": (gettext_lazy("CPU cores"), F("role__cpu"), 1000),
    "memory": (gettext_lazy("Memory GiB"), F("role__memory"), 1024),
}


def quota_subtree(quota: Quota) -> list[int]:
    """The quota's id and its descendants' (one query)."""
    children: dict[int | None, list[int]] = {}
    for pk, parent in Quota.objects.values_list("pk", "parent_id"):
        children.setdefault(parent, []).append(pk)
    ids, stack = [], [quota.pk]
    while stack:
        ids.append(stack.pop())
        stack.extend(children.get(ids[-1], []))
    return ids


def quota_history_chart(
    quota: Quota, *, resource: str = "gpu", window: str = "24h", now: datetime | None = None
) -> Chart:
    """What the quota's jobs (its descendants' included) held over the window, In Quota and
    Not in Quota, against its min: from the pods' start and finish times, so no sampling is
    needed and the chart is exact. A pod counts from its start until it finished (a live
    one until now)."""
    label, amount, unit = RESOURCES[resource]
    until = now or timezone.now()
    since = until - HISTORY_WINDOWS.get(window, HISTORY_WINDOWS["24h"])
    pods = (
        Pod.objects.filter(job__quota_id__in=quota_subtree(quota), started_at__lt=until)
        .filter(
            Q(finished_at__gt=since)
            | Q(finished_at__isnull=True, status__in=(PodStatus.PENDING, PodStatus.RUNNING))
        )
        .exclude(in_quota__isnull=True)
        .annotate(amount=amount)
        .values_list("started_at", "finished_at", "in_quota", "amount")
    )
    spans: dict[bool, list[tuple[float, float | None, int]]] = {True: [], False: []}
    for started, finished, in_quota, held in pods.iterator():
        spans[in_quota].append((started.timestamp(), finished and finished.timestamp(), held))
    start, end = since.timestamp(), until.timestamp()

    def series(points: list[tuple[float, int]]) -> list[tuple[float, Decimal]]:
        return [(at, Decimal(value) / unit) for at, value in points]

    minimum = {"gpu": quota.min_gpu * MILLI, "cpu": quota.min_cpu, "memory": quota.min_memory}
    lines = [
        (
            gettext("In Quota"),
            "in_quota",
            series(engine.use_over_time(spans[True], since=start, until=end)),
        ),
        (
            gettext("Not in Quota (borrowed)"),
            "borrowed",
            series(engine.use_over_time(spans[False], since=start, until=end)),
        ),
        (gettext("min"), "min", series([(start, minimum[resource])])),
    ]
    return chart_build(
        lines,
        since=since,
        until=until,
        zone=timezone.get_current_timezone(),
        references=(),
        y_text=lambda v: format(v.quantize(Decimal("0.001")).normalize(), "f"),
        from_zero=True,
    )


def recent_workload(*, since: datetime) -> tuple[tuple[int, int, float], ...]:
    """FGD's target workload (`engine.target_workload`) from the pods of the quota jobs
    submitted since then, whatever became of them; empty when there are none (the engine then
    takes the queue's mix)."""
    rows = (
        JobRole.objects.filter(
            job__resource_source=ResourceSource.QUOTA, job__submitted_at__gte=since
        )
        .values_list("gpu", "gpu_milli", "cpu")
        .annotate(count=Sum("pod_count"))
        .order_by()
    )
    return engine.target_workload(
        (milli or gpu * MILLI, cpu, count) for gpu, milli, cpu, count in rows
    )


@dataclass(frozen=True)
class WorkloadShape:
    """One pod shape of FGD's target workload, as the health page shows it."""

    gpu: str  # "0.5", "1", "8"
    cpu: int  # millicores
    percent: float  # of the workload's pods


@dataclass(frozen=True)
class PlacementStatus:
    rule: str  # SCHEDULER_PLACEMENT
    hours: float  # SCHEDULER_WORKLOAD_HOURS
    shapes: list[WorkloadShape]  # FGD's workload now, most common first (empty: best fit)


def placement_status(*, now: datetime) -> PlacementStatus:
    """The placement rule in force and, under FGD, the pod shapes it keeps room for."""
    rule, hours = settings.SCHEDULER_PLACEMENT, settings.SCHEDULER_WORKLOAD_HOURS
    shapes = []
    if rule == "fgd":
        workload = recent_workload(since=now - timedelta(hours=hours))
        for milli, cpu, weight in sorted(workload, key=lambda s: (-s[2], s[0], s[1])):
            shapes.append(WorkloadShape(gpu_text(*divmod(milli, MILLI)), cpu, weight * 100))
    return PlacementStatus(rule=rule, hours=hours, shapes=shapes)
