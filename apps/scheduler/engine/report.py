"""What the quotas page shows: each quota's use, free guarantee, borrowing and lending, and
who borrows from whom.

One rule for the page and the tests: `lending` works on sums (what the page reads from the
database in a few queries), and `quota_report` gives it the sums of a snapshot. Amounts are
as quotas count them (`model.milli_vec`): milli-GPUs, millicores, MiB.

Borrowers are not tied to one lender: any borrower in a pool may be preempted when any
owner there reclaims. So the idle room used Not in Quota in a pool is put down first to
capacity that no root quota guarantees; the rest is lent by the root quotas in proportion
to their free `min`, and within a quota, beyond what its own (not sub-divided) free part
can carry, by its children in proportion to theirs. Every borrowing quota then owes each
lender in proportion to what it borrows in the pool (`Loan`). Integer shares, rounded down.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from apps.scheduler.engine.model import (
    MILLI,
    Quota,
    Resources,
    Snapshot,
    milli_vec,
    quota_chains,
)
from apps.scheduler.engine.vectors import Vec, add, sub, sum_of

ZERO: Vec = (0, 0, 0)


@dataclass(frozen=True, slots=True)
class QuotaReport:
    """One quota on the quotas page (amounts in milli-GPUs, millicores, MiB). `used`: In
    Quota use by the quota and its descendants (what counts against `min`); `free`: `min -
    used`, never below zero; `borrowed`: Not-in-Quota use by jobs of the quota and its
    descendants; `lent`: the part of `free` that borrowers run on (see the module)."""

    quota_id: int
    name: str
    min: Vec
    used: Vec
    free: Vec
    borrowed: Vec
    lent: Vec


@dataclass(frozen=True, slots=True)
class Loan:
    """Idle room of a pool that jobs of `borrower` (a quota, its own jobs only) use on the
    free guarantee of `lender` (its own part, not its children's), or with `lender` None
    on capacity that no quota guarantees."""

    pool_id: int
    borrower: int
    lender: int | None
    amount: Vec


@dataclass(frozen=True, slots=True)
class Lending:
    quotas: dict[int, QuotaReport]
    loans: list[Loan]


def lending(
    quotas: Sequence[Quota],
    *,
    used: Mapping[int, Vec],
    borrowed: Mapping[tuple[int, int], Vec],
    capacity: Mapping[int, Vec],
) -> Lending:
    """Use, free guarantee, borrowing, lending and loans of every quota, from sums.

    - used: quota id → In Quota use of the quota's own jobs (not its descendants');
    - borrowed: (quota id, pool id) → Not-in-Quota use of the quota's own jobs in that pool;
    - capacity: pool id → its schedulable capacity.
    """
    by_id = {q.id: q for q in quotas}
    chains = quota_chains(by_id)
    sub_used = {qid: ZERO for qid in by_id}
    sub_borrowed = {qid: ZERO for qid in by_id}
    for qid, chain in chains.items():
        own_borrowed = sum_of(v for (q, _), v in borrowed.items() if q == qid)
        for ancestor in chain:
            sub_used[ancestor.id] = add(sub_used[ancestor.id], used.get(qid, ZERO))
            sub_borrowed[ancestor.id] = add(sub_borrowed[ancestor.id], own_borrowed)
    minimum = {qid: milli_vec(q.min) for qid, q in by_id.items()}
    free = {qid: _floor0(sub(minimum[qid], sub_used[qid])) for qid in by_id}
    children: dict[int | None, list[int]] = {}
    for q in sorted(by_id.values(), key=lambda q: q.id):
        children.setdefault(q.parent_id, []).append(q.id)
    lent = {qid: ZERO for qid in by_id}
    own_lent: dict[int | None, Vec] = {}
    loans: list[Loan] = []
    pools = sorted(set(capacity) | {p for _, p in borrowed})
    for pool_id in pools:
        idle_use = sum_of(v for (_, p), v in borrowed.items() if p == pool_id)
        if idle_use == ZERO:
            continue
        roots = [qid for qid in children.get(None, []) if by_id[qid].pool_id == pool_id]
        guaranteed = sum_of(minimum[qid] for qid in roots)
        unguaranteed = _floor0(sub(capacity.get(pool_id, ZERO), guaranteed))
        pots: dict[int | None, Vec] = {None: _min(idle_use, unguaranteed)}
        _share(_floor0(sub(idle_use, unguaranteed)), roots, free, children, lent, pots)
        own_lent.update(pots)
        takers = sorted((q, v) for (q, p), v in borrowed.items() if p == pool_id and v != ZERO)
        for lender, pot in pots.items():
            if pot == ZERO:
                continue
            for borrower, amount in takers:
                part = _scaled(amount, pot, idle_use)
                if part != ZERO:
                    loans.append(Loan(pool_id, borrower, lender, part))
    reports = {
        qid: QuotaReport(
            qid, q.name, minimum[qid], sub_used[qid], free[qid], sub_borrowed[qid], lent[qid]
        )
        for qid, q in by_id.items()
    }
    return Lending(reports, loans)


def quota_report(snapshot: Snapshot) -> dict[int, QuotaReport]:
    """`lending`'s quota figures for a snapshot's running jobs (pods count as quotas count
    them: a shared pod its milli-GPUs)."""
    return snapshot_lending(snapshot).quotas


def snapshot_lending(snapshot: Snapshot) -> Lending:
    """`lending` on the sums of a snapshot."""
    pool_of = {n.id: n.pool_id for n in snapshot.nodes}
    capacity: dict[int, Vec] = {}
    for node in snapshot.nodes:
        if node.schedulable:
            capacity[node.pool_id] = add(capacity.get(node.pool_id, ZERO), milli_vec(node.capacity))
    used: dict[int, Vec] = {}
    borrowed: dict[tuple[int, int], Vec] = {}
    for job in snapshot.running:
        if job.quota_id is None:
            continue
        for pod in job.pods:
            amount = milli_vec(pod.resources, pod.gpu_milli)
            if pod.in_quota:
                used[job.quota_id] = add(used.get(job.quota_id, ZERO), amount)
            elif pod.node_id in pool_of:
                key = (job.quota_id, pool_of[pod.node_id])
                borrowed[key] = add(borrowed.get(key, ZERO), amount)
    return lending(snapshot.quotas, used=used, borrowed=borrowed, capacity=capacity)


def quota_usage(snapshot: Snapshot) -> dict[int, Resources]:
    """In Quota use of every quota, its descendants' included: what counts against its min
    (GPUs as a count, a share of one counted as its part)."""
    return {
        qid: Resources(cpu=r.used[1], memory=r.used[2], gpu=r.used[0] // MILLI)
        for qid, r in quota_report(snapshot).items()
    }


def _floor0(a: Sequence[int]) -> Vec:
    return (max(a[0], 0), max(a[1], 0), max(a[2], 0))


def _min(a: Vec, b: Vec) -> Vec:
    return (min(a[0], b[0]), min(a[1], b[1]), min(a[2], b[2]))


def _scaled(amount: Vec, part: Vec, whole: Vec) -> Vec:
    """amount × part / whole, component by component, rounded down (0 where whole is 0)."""
    return tuple(  # type: ignore[return-value]
        amount[i] * part[i] // whole[i] if whole[i] else 0 for i in range(3)
    )


def _share(
    amount: Vec,
    qids: Iterable[int],
    free: dict[int, Vec],
    children: dict[int | None, list[int]],
    lent: dict[int, Vec],
    pots: dict[int | None, Vec],
) -> None:
    """Split lent room among sibling quotas in proportion to their free min; what a quota's
    own free part carries (beyond its children's) goes in its pot."""
    qids = list(qids)
    total = sum_of(free[q] for q in qids)
    for qid in qids:
        part: Vec = tuple(  # type: ignore[assignment]
            free[qid][i] if total[i] <= amount[i] else amount[i] * free[qid][i] // total[i]
            for i in range(3)
        )
        lent[qid] = part
        kids = children.get(qid, [])
        own = _floor0(sub(free[qid], sum_of(free[k] for k in kids)))
        carried = _min(part, own)
        pots[qid] = carried
        if kids:
            _share(_floor0(sub(part, carried)), kids, free, children, lent, pots)


def use_over_time(
    spans: Iterable[tuple[float, float | None, int]], *, since: float, until: float
) -> list[tuple[float, int]]:
    """The amount in use over [since, until] as a step function [(time, amount)], from the
    spans of what held it: (start, end — None while it still holds —, amount). Starts at
    `since`; one point per moment the amount changes."""
    changes: dict[float, int] = {}
    for start, end, amount in spans:
        begin, stop = max(start, since), until if end is None else min(end, until)
        if stop <= begin or not amount:
            continue
        changes[begin] = changes.get(begin, 0) + amount
        if stop < until:
            changes[stop] = changes.get(stop, 0) - amount
    points = [(since, changes.pop(since, 0))]
    level = points[0][1]
    for at in sorted(changes):
        if changes[at]:
            level += changes[at]
            points.append((at, level))
    return points
