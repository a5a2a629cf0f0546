"""What the quotas page shows: each quota's use, free guarantee, borrowing and lending.

It reads the quota tree as the planner does (`model.quota_chains`, `model.subtree_use`), so
the page and the scheduler agree on what a quota has used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from apps.scheduler.engine.model import (
    Resources,
    Snapshot,
    quota_chains,
    subtree_use,
    vec,
)
from apps.scheduler.engine.vectors import Vec, grow, sub, sum_of


@dataclass(frozen=True, slots=True)
class QuotaReport:
    """One quota on the quotas page. `used`: In Quota use by the quota and its descendants
    (what counts against `min`); `free`: `min - used`, never below zero; `borrowed`: Not-in-
    Quota use by jobs of the quota and its descendants; `lent`: the part of `free` that
    other work runs on, Not in Quota (see `quota_report`)."""

    quota_id: int
    name: str
    min: Resources
    used: Resources
    free: Resources
    borrowed: Resources
    lent: Resources


def quota_usage(snapshot: Snapshot) -> dict[int, Resources]:
    """In Quota use of every quota, its descendants' included: what counts against its min."""
    quotas = {q.id: q for q in snapshot.quotas}
    used = subtree_use(quota_chains(quotas), snapshot.running, in_quota=True)
    return {qid: _res(used[qid]) for qid in quotas}


def quota_report(snapshot: Snapshot) -> dict[int, QuotaReport]:
    """Use, free guarantee, borrowing and lending of every quota.

    Idle room used Not in Quota in a pool is first put down to capacity that no root quota
    guarantees; the rest is lent by the root quotas in proportion to their free `min`, and
    within a quota, beyond what its own (not sub-divided) free part can carry, by its
    children in proportion to theirs. Integer shares, rounded down.
    """
    quotas = {q.id: q for q in snapshot.quotas}
    chains = quota_chains(quotas)
    used = subtree_use(chains, snapshot.running, in_quota=True)
    borrowed = subtree_use(chains, snapshot.running, in_quota=False)
    free = {qid: _floor0(sub(vec(q.min), tuple(used[qid]))) for qid, q in quotas.items()}
    lent = {qid: (0, 0, 0) for qid in quotas}
    children: dict[int | None, list[int]] = {}
    for q in sorted(quotas.values(), key=lambda q: q.id):
        children.setdefault(q.parent_id, []).append(q.id)
    for pool_id, (capacity, idle_use) in _pool_totals(snapshot).items():
        roots = [qid for qid in children.get(None, []) if quotas[qid].pool_id == pool_id]
        guaranteed = sum_of(vec(quotas[qid].min) for qid in roots)
        unguaranteed = _floor0(sub(capacity, guaranteed))
        _share(_floor0(sub(idle_use, unguaranteed)), roots, free, children, lent)
    return {
        qid: QuotaReport(
            qid,
            q.name,
            q.min,
            _res(used[qid]),
            _res(free[qid]),
            _res(borrowed[qid]),
            _res(lent[qid]),
        )
        for qid, q in quotas.items()
    }


def _res(v: Sequence[int]) -> Resources:
    return Resources(cpu=v[1], memory=v[2], gpu=v[0])


def _floor0(a: Sequence[int]) -> Vec:
    return (max(a[0], 0), max(a[1], 0), max(a[2], 0))


def _pool_totals(snapshot: Snapshot) -> dict[int, tuple[Vec, Vec]]:
    """Per pool: schedulable capacity, and room used Not in Quota."""
    pool_of = {n.id: n.pool_id for n in snapshot.nodes}
    capacity: dict[int, list[int]] = {}
    idle_use: dict[int, list[int]] = {}
    for node in snapshot.nodes:
        idle_use.setdefault(node.pool_id, [0, 0, 0])
        if node.schedulable:
            grow(capacity.setdefault(node.pool_id, [0, 0, 0]), vec(node.capacity))
    for job in snapshot.running:
        for pod in job.pods:
            if not pod.in_quota and pod.node_id in pool_of:
                grow(idle_use[pool_of[pod.node_id]], vec(pod.resources))
    return {
        pid: (tuple(capacity.get(pid, [0, 0, 0])), tuple(use))  # type: ignore[misc]
        for pid, use in sorted(idle_use.items())
    }


def _share(
    amount: Vec,
    qids: list[int],
    free: dict[int, Vec],
    children: dict[int | None, list[int]],
    lent: dict[int, Vec],
) -> None:
    """Split lent room among sibling quotas in proportion to their free min."""
    total = sum_of(free[q] for q in qids)
    for qid in qids:
        part = tuple(
            free[qid][i] if total[i] <= amount[i] else amount[i] * free[qid][i] // total[i]
            for i in range(3)
        )
        lent[qid] = part  # type: ignore[assignment]
        kids = children.get(qid, [])
        own = _floor0(sub(free[qid], sum_of(free[k] for k in kids)))
        if kids:
            _share(_floor0(sub(part, own)), kids, free, children, lent)
