"""Reads for the quota page: each quota's guarantee, its In Quota use, what its subtree
borrows and what of its idle guarantee is lent out."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Q, Sum

from apps.cluster.clusterfile import Resources
from apps.cluster.models import Quota, ResourceType
from apps.jobs.models import Pod, PodStatus

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


def quota_usage_rows() -> dict[str, list[QuotaRow]]:
    """Rows of the quota tree per resource type (parents before children), with usage.

    - used: resources held (Running, or Pending on a node) by In Quota pods of jobs of the
      quota or any quota below it — a child's usage counts toward every ancestor.
    - borrowed: the same for Not in Quota pods of those jobs (idle capacity they run on).
    - lent: the idle part of the guarantee, max(0, min − used), capped by what borrowers
      hold in the quota's pool right now. Borrowers are not attributed to one quota, so
      this is how much of the quota's idle guarantee is lent out at most; the scheduler
      may record exact figures later.
    Four queries whatever the size of the tree: quotas, their workspaces, and two sums.
    """
    quotas = list(Quota.objects.select_related("pool").prefetch_related("workspaces"))
    own_used: dict[int, Resources] = {}
    own_borrowed: dict[int, Resources] = {}
    for row in (
        Pod.objects.filter(HOLDING, job__quota__isnull=False, in_quota__isnull=False)
        .values("job__quota_id", "in_quota")
        .annotate(**_SUMS)
    ):
        target = own_used if row["in_quota"] else own_borrowed
        target[row["job__quota_id"]] = _resources(row)
    pool_borrowed = {
        row["node__pool_id"]: _resources(row)
        for row in Pod.objects.filter(HOLDING, in_quota=False, node__isnull=False)
        .values("node__pool_id")
        .annotate(**_SUMS)
    }

    children: dict[int | None, list[Quota]] = {}
    for q in quotas:
        children.setdefault(q.parent_id, []).append(q)
    used: dict[int, Resources] = {}
    borrowed: dict[int, Resources] = {}

    def roll_up(q: Quota) -> None:
        used[q.pk] = own_used.get(q.pk, Resources())
        borrowed[q.pk] = own_borrowed.get(q.pk, Resources())
        for child in children.get(q.pk, []):
            roll_up(child)
            used[q.pk] += used[child.pk]
            borrowed[q.pk] += borrowed[child.pk]

    rows: dict[str, list[QuotaRow]] = {rt: [] for rt in ResourceType.values}

    def emit(q: Quota, depth: int) -> None:
        minimum = Resources(q.min_cpu, q.min_memory, q.min_gpu * 1000)
        idle_takers = pool_borrowed.get(q.pool_id, Resources())
        usage = {
            r: Usage(
                resource=r,
                min=minimum.get(r),
                used=used[q.pk].get(r),
                borrowed=borrowed[q.pk].get(r),
                lent=min(max(0, minimum.get(r) - used[q.pk].get(r)), idle_takers.get(r)),
            )
            for r in ("gpu", "cpu", "memory")
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
        roll_up(root)
        emit(root, 0)
    return {rt: r for rt, r in rows.items() if r}


def _resources(row: dict) -> Resources:
    return Resources(row["cpu"] or 0, row["memory"] or 0, row["gpu"] or 0)


def _trim(number: float) -> str:
    return f"{number:.1f}".removesuffix(".0")
