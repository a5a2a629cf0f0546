"""The scheduling core: plain frozen dataclasses in, a plan out. No Django, no Celery, no clock.

One call, `plan(snapshot, now=..., config=...)`, decides for the queue of a dedicated pool
which pending jobs start now (and on which nodes), which borrowers are preempted, and why
every other job is still waiting. The live tick, the tests and the simulator all call it.

How a pass runs (design.md §4):

1. Queue order is priority (high first), then submission time, then job id. Every quota is
   one queue; all queues are walked together in that order, so each quota's order holds.
2. **Owners' pass.** Every job that runs on its quota's guarantee is tried first:
   - a regular job (idle mode "off") needs free `min` for its whole request in its quota and
     in every ancestor, and room on the pool's nodes; all its pods are In Quota. When the
     quota has room but the nodes do not, it reclaims: it picks borrowers to preempt (see
     `_Planner._choose`), and waits, holding the room those borrowers will leave, until they
     are gone; it is admitted in a later tick.
   - an "acceptable" job whose whole request fits its quota's free `min` and the nodes is
     admitted here, all In Quota, in its place in the queue. Otherwise it is deferred to the
     borrowers' pass. It never reclaims and never blocks a queue in this pass: a job that has
     agreed to run on idle room must not hold back the owners behind it.
   - "only_idle" jobs are deferred.
3. **Borrowers' pass.** The deferred jobs, in the same order, on what the owners left:
   an acceptable job first takes whatever free `min` its quota chain still has, pod by pod
   in its pods' order (In Quota), and runs the rest Not in Quota on idle node room; an
   only_idle job runs wholly Not in Quota. Not-in-Quota pods are bound by node room only.
   So a borrower admitted in a plan never takes node room or quota room that a regular
   job could use in the same plan, nor room held for a reclaiming owner.
4. StrictFIFO: a job that cannot start blocks the jobs behind it in its quota's queue. A
   regular job blocks everyone behind it; a borrower (in the borrowers' pass) blocks only
   the borrowers behind it, because the regular jobs behind it were already decided.
   BestEffortFIFO skips a job that cannot start. A job in requeue backoff waits without
   blocking anyone.

Room on a node is tracked twice: `now` (capacity minus running pods and this plan's
admissions) and `fut` (the same, but counting pods of jobs already being stopped, and of the
victims chosen in this plan, as gone, and room held for reclaiming owners as taken).
Admissions must fit both; a reclaiming owner plans on `fut`.

Placement is gang (all pods or none) and best fit: each pod, largest first, goes to the
node that leaves the least free room, GPUs compared first, then CPU, memory, node id. When
best fit fails on a small problem (≤ 6 pods, ≤ 8 nodes that could take a pod) an exact
search runs before giving up, so a small gang that fits somehow is always found.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from typing import Literal

from apps.scheduler.lifecycle import lost_gpu_seconds

IdleMode = Literal["off", "acceptable", "only_idle"]
QueueStrategy = Literal["StrictFIFO", "BestEffortFIFO"]

_Vec = tuple[int, int, int]  # (gpu, cpu, memory): the order in which best fit compares room

_EXACT_PODS = 6
_EXACT_NODES = 8
_EXACT_BUDGET = 50_000
_GREEDY_BUDGET = (8, 16)  # victims per pod, plus, before greedy reclaim turns to node by node
_MANY = 1 << 40  # "unbounded" count of zero-sized pods a node can take


class SchedulerError(ValueError):
    """The snapshot itself is inconsistent (duplicate ids, a broken quota tree)."""


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of compute: CPU in millicores, memory in MiB, GPUs as a count."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu)

    def fits_in(self, other: Resources) -> bool:
        """True when every component is at most the other's."""
        return self.cpu <= other.cpu and self.memory <= other.memory and self.gpu <= other.gpu

    @property
    def is_zero(self) -> bool:
        return self.cpu == 0 and self.memory == 0 and self.gpu == 0

    def __str__(self) -> str:
        return _describe(_vec(self))


ZERO = Resources()


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    pool_id: int
    capacity: Resources
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class Quota:
    id: int
    name: str
    parent_id: int | None
    pool_id: int
    min: Resources
    strategy: QueueStrategy = "StrictFIFO"


@dataclass(frozen=True, slots=True)
class RunningPod:
    pod_id: int
    node_id: int
    resources: Resources
    in_quota: bool


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job with live pods. `stopping`: the job is already being stopped (preempted in an
    earlier tick, say); its pods still hold their nodes, but a reclaiming owner may count on
    their room, and it is never picked as a victim again."""

    job_id: int
    name: str
    quota_id: int | None
    idle_mode: IdleMode
    priority: int
    started_at: float  # this attempt's start: lost work and the minimum run count from it
    last_checkpoint_at: float | None  # may be older, from the attempt it resumed from
    pods: tuple[RunningPod, ...]
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class PodRequest:
    key: str  # e.g. "worker-0"
    resources: Resources


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: int
    name: str
    quota_id: int
    idle_mode: IdleMode
    priority: int
    submitted_at: float
    pods: tuple[PodRequest, ...]
    not_before: float | None = None  # requeue backoff


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[Node, ...]
    quotas: tuple[Quota, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]


@dataclass(frozen=True, slots=True)
class Config:
    min_run_seconds: float = 60.0  # a borrower younger than this is not preempted yet


@dataclass(frozen=True, slots=True)
class Placement:
    key: str
    node_id: int
    in_quota: bool


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: int
    placements: tuple[Placement, ...]  # in the order of the job's pods


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: int
    by_job_id: int
    by_quota_id: int
    lost_gpu_seconds: float
    reason: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job left pending. `position` is 1-based among the jobs still waiting in its quota's
    queue after this plan, `queue_size` their number. `reserved` is the room held for a
    reclaiming owner (where it will run once the borrowers are gone); empty otherwise."""

    job_id: int
    reason: str
    position: int
    queue_size: int
    reserved: tuple[Placement, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    waiting: tuple[Waiting, ...]


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


def plan(snapshot: Snapshot, *, now: float, config: Config = Config()) -> Plan:
    """Decide which pending jobs start, which borrowers are preempted, and why the rest wait.

    Deterministic: the same snapshot, `now` and config give an equal plan.
    """
    return _Planner(snapshot, now=now, config=config).run()


def quota_usage(snapshot: Snapshot) -> dict[int, Resources]:
    """In Quota use of every quota, its descendants' included: what counts against its min."""
    quotas = {q.id: q for q in snapshot.quotas}
    used = _subtree_use(_chains(quotas), snapshot.running, in_quota=True)
    return {qid: _res(used[qid]) for qid in quotas}


def quota_report(snapshot: Snapshot) -> dict[int, QuotaReport]:
    """Use, free guarantee, borrowing and lending of every quota.

    Idle room used Not in Quota in a pool is first put down to capacity that no root quota
    guarantees; the rest is lent by the root quotas in proportion to their free `min`, and
    within a quota, beyond what its own (not sub-divided) free part can carry, by its
    children in proportion to theirs. Integer shares, rounded down.
    """
    quotas = {q.id: q for q in snapshot.quotas}
    chains = _chains(quotas)
    used = _subtree_use(chains, snapshot.running, in_quota=True)
    borrowed = _subtree_use(chains, snapshot.running, in_quota=False)
    free = {qid: _floor0(_sub(_vec(q.min), tuple(used[qid]))) for qid, q in quotas.items()}
    lent = {qid: (0, 0, 0) for qid in quotas}
    children: dict[int | None, list[int]] = {}
    for q in sorted(quotas.values(), key=lambda q: q.id):
        children.setdefault(q.parent_id, []).append(q.id)
    for pool_id, (capacity, idle_use) in _pool_totals(snapshot).items():
        roots = [qid for qid in children.get(None, []) if quotas[qid].pool_id == pool_id]
        guaranteed = _sum(_vec(quotas[qid].min) for qid in roots)
        unguaranteed = _floor0(_sub(capacity, guaranteed))
        _share(_floor0(_sub(idle_use, unguaranteed)), roots, free, children, lent)
    return {
        qid: QuotaReport(qid, q.name, q.min, _res(used[qid]), _res(free[qid]),
                         _res(borrowed[qid]), _res(lent[qid]))
        for qid, q in quotas.items()
    }


# --- vectors ---------------------------------------------------------------------------


def _vec(r: Resources) -> _Vec:
    return (r.gpu, r.cpu, r.memory)


def _res(v: Sequence[int]) -> Resources:
    return Resources(cpu=v[1], memory=v[2], gpu=v[0])


def _fits(a: Sequence[int], b: Sequence[int]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and a[2] <= b[2]


def _add(a: Sequence[int], b: Sequence[int]) -> _Vec:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _sub(a: Sequence[int], b: Sequence[int]) -> _Vec:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _floor0(a: Sequence[int]) -> _Vec:
    return (max(a[0], 0), max(a[1], 0), max(a[2], 0))


def _sum(vs: Iterable[Sequence[int]]) -> _Vec:
    g = c = m = 0
    for v in vs:
        g, c, m = g + v[0], c + v[1], m + v[2]
    return (g, c, m)


def _low(vs: Sequence[_Vec]) -> _Vec:
    """Component-wise minimum: a node that cannot hold this holds none of the pods."""
    return (min(v[0] for v in vs), min(v[1] for v in vs), min(v[2] for v in vs))


def _count(room: Sequence[int], pod: _Vec) -> int:
    """How many pods of this shape fit in the room."""
    n = _MANY
    for i in range(3):
        if pod[i] > 0:
            n = min(n, room[i] // pod[i])
        elif room[i] < 0:
            return 0
    return max(n, 0)


# --- words -----------------------------------------------------------------------------


def _cores(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores / 1000:g}"


def _mib(mib: int) -> str:
    if mib and mib % 1024 == 0:
        return f"{mib // 1024} GiB"
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib} MiB"


def _value(i: int, value: int) -> str:
    return (str(value), _cores(value), _mib(value))[i]


def _amount(i: int, value: int) -> str:
    return f"{_value(i, value)} {('GPU', 'CPU', 'memory')[i]}"


def _describe(v: _Vec) -> str:
    parts = [_amount(i, v[i]) for i in range(3) if v[i]]
    return ", ".join(parts) if parts else "nothing"


def _main(v: _Vec) -> str:
    """The component a person sizes a pod by: GPUs if any, else CPU, else memory."""
    for i in range(3):
        if v[i]:
            return _amount(i, v[i])
    return "nothing"


def _shape(pods: Sequence[_Vec]) -> str:
    """'4×8 GPU', or '4×8 GPU + 1×4 CPU' for a mixed gang."""
    counts = Counter(_main(p) for p in sorted(pods, reverse=True))
    return " + ".join(f"{n}×{what}" for what, n in counts.items()) or "no pods"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --- quota tree ------------------------------------------------------------------------


def _chains(quotas: dict[int, Quota]) -> dict[int, tuple[Quota, ...]]:
    """Every quota with its ancestors, the quota itself first."""
    chains: dict[int, tuple[Quota, ...]] = {}
    for quota in quotas.values():
        chain: list[Quota] = []
        current: Quota | None = quota
        while current is not None:
            if current in chain:
                raise SchedulerError(f"quota {quota.name} is its own ancestor")
            chain.append(current)
            if current.parent_id is None:
                break
            current = quotas.get(current.parent_id)
            if current is None:
                raise SchedulerError(f"quota {chain[-1].name} has unknown parent")
        chains[quota.id] = tuple(chain)
    return chains


def _subtree_use(
    chains: dict[int, tuple[Quota, ...]], running: Iterable[RunningJob], *, in_quota: bool
) -> dict[int, list[int]]:
    use = {qid: [0, 0, 0] for qid in chains}
    for job in running:
        chain = chains.get(job.quota_id) if job.quota_id is not None else None
        for pod in job.pods if chain else ():
            if pod.in_quota == in_quota:
                for quota in chain:
                    _grow(use[quota.id], _vec(pod.resources))
    return use


def _grow(total: list[int], v: Sequence[int]) -> None:
    total[0] += v[0]
    total[1] += v[1]
    total[2] += v[2]


def _pool_totals(snapshot: Snapshot) -> dict[int, tuple[_Vec, _Vec]]:
    """Per pool: schedulable capacity, and room used Not in Quota."""
    pool_of = {n.id: n.pool_id for n in snapshot.nodes}
    capacity: dict[int, list[int]] = {}
    idle_use: dict[int, list[int]] = {}
    for node in snapshot.nodes:
        idle_use.setdefault(node.pool_id, [0, 0, 0])
        if node.schedulable:
            _grow(capacity.setdefault(node.pool_id, [0, 0, 0]), _vec(node.capacity))
    for job in snapshot.running:
        for pod in job.pods:
            if not pod.in_quota and pod.node_id in pool_of:
                _grow(idle_use[pool_of[pod.node_id]], _vec(pod.resources))
    return {
        pid: (tuple(capacity.get(pid, [0, 0, 0])), tuple(use))  # type: ignore[misc]
        for pid, use in sorted(idle_use.items())
    }


def _share(
    amount: _Vec, qids: list[int], free: dict[int, _Vec],
    children: dict[int | None, list[int]], lent: dict[int, _Vec],
) -> None:
    """Split lent room among sibling quotas in proportion to their free min."""
    total = _sum(free[q] for q in qids)
    for qid in qids:
        part = tuple(
            free[qid][i] if total[i] <= amount[i] else amount[i] * free[qid][i] // total[i]
            for i in range(3)
        )
        lent[qid] = part  # type: ignore[assignment]
        kids = children.get(qid, [])
        own = _floor0(_sub(free[qid], _sum(free[k] for k in kids)))
        if kids:
            _share(_floor0(_sub(part, own)), kids, free, children, lent)


# --- node room -------------------------------------------------------------------------


class _Pool:
    """Room on one pool's schedulable nodes during one planning pass.

    Admissions must fit `now` and `fut` (module docstring), so they look at
    `eff = min(now, fut)`, indexed as one list per free-GPU count of (free cpu, free memory,
    node id), kept sorted: best fit is then a bisect in at most a few lists rather than a
    scan of every node. Within one pass room only shrinks (or is handed back by a rollback),
    so a gang shape that failed once fails again: `failed` remembers those.
    """

    def __init__(self, pool_id: int, nodes: list[Node]) -> None:
        self.id = pool_id
        self.cap = {n.id: _vec(n.capacity) for n in nodes}
        self.now = {n: list(v) for n, v in self.cap.items()}
        self.fut = {n: list(v) for n, v in self.cap.items()}
        self.eff: dict[int, _Vec] = {}
        width = max((v[0] for v in self.cap.values()), default=0) + 1
        self.buckets: list[list[tuple[int, int, int]]] = [[] for _ in range(max(width, 1))]
        self.free = [0, 0, 0]  # sum of indexed eff
        self.freeing: set[int] = set()  # nodes where fut exceeds now somewhere
        self.failed: set[tuple[_Vec, ...]] = set()
        self.reclaim_failed: set[tuple[tuple[_Vec, ...], bool]] = set()
        self.version = dict.fromkeys(self.cap, 0)  # bumped whenever a node's room changes

    def occupy(self, node_id: int, v: _Vec, *, leaving: bool) -> None:
        """A running pod, before `build`. A leaving pod holds `now` but not `fut`."""
        now = self.now[node_id]
        now[0], now[1], now[2] = now[0] - v[0], now[1] - v[1], now[2] - v[2]
        if not leaving:
            fut = self.fut[node_id]
            fut[0], fut[1], fut[2] = fut[0] - v[0], fut[1] - v[1], fut[2] - v[2]

    def build(self) -> None:
        for n in self.cap:
            now, fut = self.now[n], self.fut[n]
            e = (min(now[0], fut[0]), min(now[1], fut[1]), min(now[2], fut[2]))
            self.eff[n] = e
            if not _fits(fut, now):
                self.freeing.add(n)
            if e[0] >= 0 and e[1] >= 0 and e[2] >= 0:
                self.buckets[e[0]].append((e[1], e[2], n))
                _grow(self.free, e)
        for bucket in self.buckets:
            bucket.sort()

    def _update(self, n: int, *, grown_ok: bool = False) -> None:
        self.version[n] += 1
        now, fut = self.now[n], self.fut[n]
        new = (min(now[0], fut[0]), min(now[1], fut[1]), min(now[2], fut[2]))
        if _fits(fut, now):
            self.freeing.discard(n)
        else:
            self.freeing.add(n)
        old = self.eff[n]
        if new == old:
            return
        if old[0] >= 0 and old[1] >= 0 and old[2] >= 0:
            bucket = self.buckets[old[0]]
            del bucket[bisect_left(bucket, (old[1], old[2], n))]
            _grow(self.free, (-old[0], -old[1], -old[2]))
        if new[0] >= 0 and new[1] >= 0 and new[2] >= 0:
            insort(self.buckets[new[0]], (new[1], new[2], n))
            _grow(self.free, new)
        self.eff[n] = new
        if not grown_ok and not _fits(new, old):
            self.failed.clear()  # more room than before: old failures may now fit

    def take(self, n: int, v: _Vec) -> None:
        """Admit a pod on the node."""
        _grow(self.now[n], (-v[0], -v[1], -v[2]))
        _grow(self.fut[n], (-v[0], -v[1], -v[2]))
        self._update(n)

    def give_back(self, n: int, v: _Vec) -> None:
        """Undo `take` (a gang that did not fit after all)."""
        _grow(self.now[n], v)
        _grow(self.fut[n], v)
        self._update(n, grown_ok=True)

    def reserve(self, n: int, v: _Vec) -> None:
        """Hold room that will be free once the victims are gone."""
        _grow(self.fut[n], (-v[0], -v[1], -v[2]))
        self._update(n)

    def release(self, n: int, v: _Vec) -> None:
        """A victim's pod: its room will be free."""
        _grow(self.fut[n], v)
        self._update(n)

    def best(self, pod: _Vec) -> int | None:
        """The node best fit leaves with the least room, or None."""
        g, c, m = pod
        buckets = self.buckets
        for b in range(max(g, 0), len(buckets)):
            bucket = buckets[b]
            if not bucket:
                continue
            for j in range(bisect_left(bucket, (c, m)), len(bucket)):
                entry = bucket[j]
                if entry[1] >= m:
                    return entry[2]
        return None

    def place(self, pods: Sequence[_Vec]) -> list[int] | None:
        """Place a whole gang and take its room, or take nothing and return None."""
        if not pods:
            return []
        key = tuple(sorted(pods))
        if key in self.failed:
            return None
        if not _fits(_sum(pods), self.free):
            self.failed.add(key)
            return None
        nodes = [0] * len(pods)
        done: list[int] = []
        for i in _largest_first(pods):
            n = self.best(pods[i])
            if n is None:
                break
            self.take(n, pods[i])
            nodes[i] = n
            done.append(i)
        else:
            return nodes
        for i in reversed(done):
            self.give_back(nodes[i], pods[i])
        exact = self._exact(pods)
        if exact is None:
            self.failed.add(key)
            return None
        for i, n in enumerate(exact):
            self.take(n, pods[i])
        return exact

    def _exact(self, pods: Sequence[_Vec]) -> list[int] | None:
        if len(pods) > _EXACT_PODS:
            return None
        room = self.fitting(_low(pods), limit=_EXACT_NODES)
        return _search(pods, room) if room is not None else None

    def fitting(self, lo: _Vec, limit: int | None = None) -> dict[int, _Vec] | None:
        """Nodes whose eff room holds `lo`; None when there are more than `limit`."""
        out: dict[int, _Vec] = {}
        for b in range(max(lo[0], 0), len(self.buckets)):
            bucket = self.buckets[b]
            for j in range(bisect_left(bucket, (lo[1], lo[2])), len(bucket)):
                c, m, n = bucket[j]
                if m >= lo[2]:
                    out[n] = (b, c, m)
                    if limit is not None and len(out) > limit:
                        return None
        return out

    def future_room(self, lo: _Vec) -> dict[int, _Vec]:
        """Nodes whose fut room holds `lo`, with that room: where a reclaimer can plan."""
        room = {n: v for n, v in (self.fitting(lo) or {}).items() if n not in self.freeing}
        for n in sorted(self.freeing):
            fut = self.fut[n]
            if _fits(lo, fut):
                room[n] = (fut[0], fut[1], fut[2])
        return room

    def max_free(self, i: int) -> int:
        """The most GPUs (i=0) or CPU (i=1) free on one node."""
        if i == 0:
            return next((b for b in range(len(self.buckets) - 1, -1, -1) if self.buckets[b]), 0)
        return max((bucket[-1][0] for bucket in self.buckets if bucket), default=0)


def _largest_first(pods: Sequence[_Vec]) -> list[int]:
    return sorted(range(len(pods)), key=lambda i: (-pods[i][0], -pods[i][1], -pods[i][2], i))


def _place_on(pods: Sequence[_Vec], room: dict[int, _Vec]) -> list[int] | None:
    """Best fit of a gang onto a room map (same rule as `_Pool.place`), without indexes."""
    free = {n: list(v) for n, v in room.items() if v[0] >= 0 and v[1] >= 0 and v[2] >= 0}
    nodes = [0] * len(pods)
    for i in _largest_first(pods):
        g, c, m = pods[i]
        best, best_key = None, None
        for n, r in free.items():
            if r[0] >= g and r[1] >= c and r[2] >= m:
                key = (r[0], r[1], r[2], n)
                if best_key is None or key < best_key:
                    best, best_key = n, key
        if best is None:
            return _search(pods, room) if len(pods) <= _EXACT_PODS else None
        r = free[best]
        r[0], r[1], r[2] = r[0] - g, r[1] - c, r[2] - m
        nodes[i] = best
    return nodes


def _search(pods: Sequence[_Vec], room: dict[int, _Vec]) -> list[int] | None:
    """Exhaustive gang placement for small cases; None when none exists (or too big)."""
    if not pods:
        return []
    lo = _low(pods)
    nodes = sorted((n for n, v in room.items() if _fits(lo, v)), key=lambda n: (*room[n], n))
    if len(pods) > _EXACT_PODS or len(nodes) > _EXACT_NODES:
        return None
    order = _largest_first(pods)
    free = [list(room[n]) for n in nodes]
    slot = [0] * len(pods)
    budget = [_EXACT_BUDGET]

    def fill(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        g, c, m = pods[i]
        # Alike pods take nodes in non-decreasing order: each multiset is tried once.
        start = slot[order[k - 1]] if k and pods[order[k - 1]] == pods[i] else 0
        for j in range(start, len(nodes)):
            r = free[j]
            if r[0] >= g and r[1] >= c and r[2] >= m:
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                r[0], r[1], r[2] = r[0] - g, r[1] - c, r[2] - m
                slot[i] = j
                if fill(k + 1):
                    return True
                r[0], r[1], r[2] = r[0] + g, r[1] + c, r[2] + m
        return False

    return [nodes[slot[i]] for i in range(len(pods))] if fill(0) else None


class _Fit:
    """Room for one reclaiming job while victim sets are tried.

    Keeps, for each distinct pod shape, how many such pods the room could hold node by
    node. For a gang of alike pods (the usual case) that count decides exactly; for a
    mixed gang it rules most sets out before a real placement is tried.
    """

    def __init__(self, pods: Sequence[_Vec], base: dict[int, _Vec], fut: dict[int, list[int]]):
        self.pods = pods
        self.shapes = sorted(Counter(pods).items())
        self.room = dict(base)
        self.fut = fut
        self.counts = [sum(_count(r, s) for r in base.values()) for s, _ in self.shapes]

    def _room(self, n: int) -> _Vec:
        r = self.room.get(n)
        return r if r is not None else (self.fut[n][0], self.fut[n][1], self.fut[n][2])

    def add(self, freed: dict[int, _Vec], sign: int = 1) -> None:
        for n, v in freed.items():
            old = self._room(n)
            new = (old[0] + sign * v[0], old[1] + sign * v[1], old[2] + sign * v[2])
            self.room[n] = new
            for k, (shape, _) in enumerate(self.shapes):
                self.counts[k] += _count(new, shape) - _count(old, shape)

    def enough(self) -> bool:
        return all(c >= k for c, (_, k) in zip(self.counts, self.shapes, strict=True))

    def feasible(self) -> bool:
        if not self.enough():
            return False
        return len(self.shapes) == 1 or _place_on(self.pods, self.room) is not None


# --- the planner -----------------------------------------------------------------------


@dataclass(slots=True)
class _Step:
    """Borrowers to preempt on one node for one more slot (`_Planner._choose_by_node`)."""

    key: tuple[float, int, float, int]  # lost work per slot, priorities, -newest, node
    victims: list[_Borrower]
    end: int  # where the node's next step starts in its candidate list


class _Borrower:
    """A running job that could be preempted to give room back to an owner."""

    __slots__ = ("job", "lost", "order", "young", "claimed", "freed")

    def __init__(self, job: RunningJob, *, now: float, min_run: float) -> None:
        self.job = job
        self.lost = lost_gpu_seconds(gpus=sum(p.resources.gpu for p in job.pods),
                                     started_at=job.started_at,
                                     last_checkpoint_at=job.last_checkpoint_at, now=now)
        # least lost work, then lower priority, then newest first
        self.order = (self.lost, job.priority, -job.started_at, job.job_id)
        self.young = now - job.started_at < min_run
        self.claimed = False
        self.freed: dict[int, dict[int, _Vec]] = {}  # pool id -> node id -> room it frees


class _Pending:
    __slots__ = ("job", "key", "pods", "need", "quota", "chain", "pool")

    def __init__(self, job: PendingJob, planner: _Planner) -> None:
        self.job = job
        self.key = (-job.priority, job.submitted_at, job.job_id)
        self.pods = [_vec(p.resources) for p in job.pods]
        self.need = _sum(self.pods)
        self.quota = planner.quotas.get(job.quota_id)
        self.chain = planner.chains.get(job.quota_id, ())
        self.pool = planner.pools.get(self.quota.pool_id) if self.quota else None


class _Planner:
    """State of one `plan` call. Room and usage are mutated as decisions are made."""

    def __init__(self, snapshot: Snapshot, *, now: float, config: Config) -> None:
        for what, ids in (("node", [n.id for n in snapshot.nodes]),
                          ("quota", [q.id for q in snapshot.quotas]),
                          ("pending job", [j.job_id for j in snapshot.pending])):
            if len(set(ids)) != len(ids):
                raise SchedulerError(f"duplicate {what} ids in the snapshot")
        self.snapshot = snapshot
        self.now = now
        self.config = config
        self.quotas = {q.id: q for q in snapshot.quotas}
        self.chains = _chains(self.quotas)
        self.usage = _subtree_use(self.chains, snapshot.running, in_quota=True)
        by_pool: dict[int, list[Node]] = {}
        for node in snapshot.nodes:
            if node.schedulable:
                by_pool.setdefault(node.pool_id, []).append(node)
        self.pools = {pid: _Pool(pid, nodes) for pid, nodes in sorted(by_pool.items())}
        self.pool_of = {n: pool for pool in self.pools.values() for n in pool.cap}
        self.node_pool_id = {n.id: n.pool_id for n in snapshot.nodes}
        self.freeing_jobs: dict[int, set[int]] = {}  # node id -> ids of jobs leaving it
        self.borrowers: dict[int, list[_Borrower]] = {}  # pool id -> candidates, best first
        self.victims_on: dict[int, list[_Borrower]] = {}  # node id -> candidates, best first
        self.first_steps: dict[tuple[int, _Vec, bool], tuple[int, int, _Step | None]] = {}
        self.slot_nodes: dict[tuple[int, _Vec], list[int]] = {}
        self._load_running()
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.waits: dict[int, tuple[str, tuple[Placement, ...]]] = {}
        self.blockers: dict[int, _Pending] = {}  # StrictFIFO quota id -> first job stuck

    def _load_running(self) -> None:
        for job in self.snapshot.running:
            borrower = _Borrower(job, now=self.now, min_run=self.config.min_run_seconds)
            idle_pools = set()
            for pod in job.pods:
                v = _vec(pod.resources)
                pool = self.pool_of.get(pod.node_id)
                if pool is not None:
                    pool.occupy(pod.node_id, v, leaving=job.stopping)
                    freed = borrower.freed.setdefault(pool.id, {})
                    freed[pod.node_id] = _add(freed.get(pod.node_id, (0, 0, 0)), v)
                    if job.stopping:
                        self.freeing_jobs.setdefault(pod.node_id, set()).add(job.job_id)
                if not pod.in_quota and pod.node_id in self.node_pool_id:
                    idle_pools.add(self.node_pool_id[pod.node_id])
            if job.idle_mode != "off" and not job.stopping:
                for pool_id in idle_pools:
                    self.borrowers.setdefault(pool_id, []).append(borrower)
        for pool_id, candidates in self.borrowers.items():
            candidates.sort(key=lambda b: b.order)
            for borrower in candidates:
                for n in borrower.freed.get(pool_id, {}):
                    self.victims_on.setdefault(n, []).append(borrower)
        for pool in self.pools.values():
            pool.build()

    def run(self) -> Plan:
        jobs = sorted((_Pending(j, self) for j in self.snapshot.pending), key=lambda j: j.key)
        deferred = [job for job in jobs if not self._owners_pass(job)]
        for job in deferred:
            self._borrowers_pass(job)
        return Plan(tuple(self.admissions), tuple(self.preemptions), self._waiting(jobs))

    # -- the two passes --

    def _owners_pass(self, job: _Pending) -> bool:
        """Decide a job on its quota's guarantee; False defers it to the borrowers' pass."""
        pending = job.job
        if job.quota is None:
            self._wait(job, f"unknown quota {pending.quota_id}")
            return True
        if not pending.pods:  # nothing to place is not "fits": it is never admitted
            self._wait(job, "it has no pods to place")
            return True
        if pending.not_before is not None and pending.not_before > self.now:
            left = pending.not_before - self.now
            self._wait(job, f"requeue backoff until {pending.not_before:.0f} ({left:.0f} s left)")
            return True
        if (blocker := self._blocker(job)) is not None:
            self._wait(job, f"blocked behind {blocker.job.name} (StrictFIFO)")
            return True
        if pending.idle_mode == "only_idle":
            return False
        shortfall = self._shortfall(job)
        if pending.idle_mode == "acceptable":
            if shortfall is None and job.pool is not None:
                nodes = job.pool.place(job.pods)
                if nodes is not None:
                    self._admit(job, nodes, [True] * len(nodes))
                    return True
            return False
        if shortfall is not None:
            self._stuck(job, shortfall)
        elif job.pool is None:
            self._stuck(job, f"no schedulable node in pool {job.quota.pool_id}")
        elif (nodes := job.pool.place(job.pods)) is not None:
            self._admit(job, nodes, [True] * len(nodes))
        else:
            self._reclaim(job)
        return True

    def _borrowers_pass(self, job: _Pending) -> None:
        if (blocker := self._blocker(job)) is not None:
            self._wait(job, f"blocked behind {blocker.job.name} (StrictFIFO)")
            return
        if job.pool is None:
            assert job.quota is not None  # unknown quotas were settled in the owners' pass
            self._stuck(job, f"no schedulable node in pool {job.quota.pool_id}")
            return
        acceptable = job.job.idle_mode == "acceptable"
        in_quota = self._split(job) if acceptable else [False] * len(job.pods)
        nodes = job.pool.place(job.pods)
        if nodes is None:
            self._stuck(job, f"no idle room: {self._needs(job)}")
        else:
            self._admit(job, nodes, in_quota)

    # -- quotas --

    def _shortfall(self, job: _Pending) -> str | None:
        """Why the quota chain cannot hold the whole job In Quota; None when it can."""
        for quota in job.chain:
            free = _sub(_vec(quota.min), self.usage[quota.id])
            if not _fits(job.need, free):
                i = next(i for i in range(3) if job.need[i] > free[i])
                own = job.chain[0].name
                where = own if quota is job.chain[0] else f"{quota.name} (ancestor of {own})"
                return (f"quota {where}: needs {_amount(i, job.need[i])}, "
                        f"{_value(i, max(free[i], 0))} free")
        return None

    def _split(self, job: _Pending) -> list[bool]:
        """Which pods of an acceptable job run In Quota: those the chain's free min holds."""
        free = [min(q.min.gpu - self.usage[q.id][0] for q in job.chain),
                min(q.min.cpu - self.usage[q.id][1] for q in job.chain),
                min(q.min.memory - self.usage[q.id][2] for q in job.chain)]
        flags = []
        for pod in job.pods:
            fits = _fits(pod, free)
            if fits:
                _grow(free, (-pod[0], -pod[1], -pod[2]))
            flags.append(fits)
        return flags

    def _use(self, job: _Pending, v: _Vec) -> None:
        for quota in job.chain:
            _grow(self.usage[quota.id], v)

    # -- decisions --

    def _admit(self, job: _Pending, nodes: list[int], in_quota: list[bool]) -> None:
        self._use(job, _sum(p for p, flag in zip(job.pods, in_quota, strict=True) if flag))
        placements = tuple(
            Placement(key=request.key, node_id=n, in_quota=flag)
            for request, n, flag in zip(job.job.pods, nodes, in_quota, strict=True)
        )
        self.admissions.append(Admission(job_id=job.job.job_id, placements=placements))

    def _wait(self, job: _Pending, reason: str, reserved: tuple[Placement, ...] = ()) -> None:
        self.waits[job.job.job_id] = (reason, reserved)

    def _stuck(self, job: _Pending, reason: str, reserved: tuple[Placement, ...] = ()) -> None:
        """The job could not start: it waits, and in a StrictFIFO queue blocks those behind."""
        self._wait(job, reason, reserved)
        quota = job.quota
        if quota is not None and quota.strategy == "StrictFIFO":
            current = self.blockers.get(quota.id)
            if current is None or job.key < current.key:
                self.blockers[quota.id] = job

    def _blocker(self, job: _Pending) -> _Pending | None:
        blocker = self.blockers.get(job.job.quota_id)
        return blocker if blocker is not None and blocker.key < job.key else None

    def _needs(self, job: _Pending) -> str:
        pool = job.pool
        assert pool is not None
        i = 0 if job.need[0] else 1
        return (f"needs {_shape(job.pods)} ({_amount(i, pool.free[i])} free in pool, "
                f"at most {_amount(i, pool.max_free(i))} on one node)")

    # -- reclaim --

    def _reclaim(self, job: _Pending) -> None:
        """A regular job with quota but no node room: take room back from borrowers.

        Room already on its way (jobs being stopped, victims of an earlier owner in this
        plan) is used first; then borrowers old enough to preempt; if only young borrowers
        would do, the job waits for them to reach the minimum run time. In every case the
        room it will use is held, in nodes and in quota, for the rest of this plan.
        """
        pool = job.pool
        assert pool is not None
        base = pool.future_room(_low(job.pods)) if job.pods else {}
        nodes = _place_on(job.pods, base)
        if nodes is not None:
            leaving = set().union(*(self.freeing_jobs.get(n, set()) for n in set(nodes)))
            self._hold(job, nodes, f"room being freed by {_plural(len(leaving), 'job')}")
            return
        for young_ok in (False, True):
            chosen = self._choose(job, base, young_ok=young_ok)
            if chosen is not None:
                break
        else:
            self._stuck(job, f"no node has room: {self._needs(job)}")
            return
        victims, nodes = chosen
        self._claim(victims)
        if young_ok:
            young = sum(v.young for v in victims)
            self._hold(job, nodes, (
                f"borrowers to reclaim have run less than the minimum "
                f"{self.config.min_run_seconds:g} s: {_plural(young, 'job')}"))
            return
        for victim in victims:
            self.preemptions.append(self._preemption(victim, job))
        self._hold(job, nodes, f"borrowers being reclaimed: {_plural(len(victims), 'job')}")

    def _choose(
        self, job: _Pending, base: dict[int, _Vec], *, young_ok: bool
    ) -> tuple[list[_Borrower], list[int]] | None:
        """A minimal set of borrowers whose room, added to `base`, holds the job's gang.

        Greedy over all candidates in victim order (least lost work, lower priority,
        newest) until the gang fits. When that takes more than a few victims per pod (the
        cheapest borrowers are scattered over many nodes), by node instead
        (`_choose_by_node`); and if that finds nothing, the greedy again, to the end. A
        pruning pass (`_trim`) then makes the set minimal: the gang does not fit without
        any one of the victims kept.
        """
        pool = job.pool
        assert pool is not None
        memo = (tuple(sorted(job.pods)), young_ok)
        if memo in pool.reclaim_failed:
            return None
        budget = _GREEDY_BUDGET[0] * len(job.pods) + _GREEDY_BUDGET[1]
        found, gave_up = self._choose_greedy(job, base, young_ok=young_ok, budget=budget)
        if gave_up:
            found = self._choose_by_node(job, base, young_ok=young_ok)
            if found is None:
                found, _ = self._choose_greedy(job, base, young_ok=young_ok, budget=None)
        if found is None:
            pool.reclaim_failed.add(memo)
            return None
        chosen, fit = self._trim(job, base, *found)
        nodes = _place_on(job.pods, fit.room)
        assert nodes is not None
        return chosen, nodes

    def _choose_greedy(
        self, job: _Pending, base: dict[int, _Vec], *, young_ok: bool, budget: int | None
    ) -> tuple[tuple[list[_Borrower], _Fit] | None, bool]:
        """Victims in victim order until the gang fits; True as well if it gave up at
        `budget` victims without knowing."""
        pool = job.pool
        assert pool is not None
        lo = _low(job.pods)
        fit = _Fit(job.pods, base, pool.fut)
        chosen: list[_Borrower] = []
        next_try = 0
        for victim in self.borrowers.get(pool.id, ()):
            freed = victim.freed.get(pool.id)
            if victim.claimed or (victim.young and not young_ok) or not freed:
                continue
            if not any(_fits(lo, pool.cap[n]) for n in freed):
                continue  # frees nothing this gang could use
            if budget is not None and len(chosen) == budget:
                return None, True
            chosen.append(victim)
            fit.add(freed)
            if not fit.enough():
                continue
            if len(fit.shapes) == 1:
                break
            if len(chosen) >= next_try:
                if _place_on(job.pods, fit.room) is not None:
                    break
                next_try = len(chosen) + max(1, len(chosen) // 4)
        else:
            if not fit.feasible():
                return None, False
        return (chosen, fit), False

    def _choose_by_node(
        self, job: _Pending, base: dict[int, _Vec], *, young_ok: bool
    ) -> tuple[list[_Borrower], _Fit] | None:
        """Victims picked node by node, cheapest pod slot first.

        A slot is room for the gang's envelope (its largest pod in every component), so as
        many slots as pods always hold the gang. Each node opens slots in steps: its
        borrowers, in victim order, until one more slot opens; a step costs their lost work
        per slot opened, then their priorities, then newest. Steps are taken cheapest first
        until there are enough slots. A borrower taken for one node frees its room on its
        other nodes too, whose next steps are then recomputed. The first step of every node
        is cached until that node's room changes, so a queue of reclaiming owners does not
        rescan every borrower of the pool each time.
        """
        pool = job.pool
        assert pool is not None
        envelope = (max(p[0] for p in job.pods), max(p[1] for p in job.pods),
                    max(p[2] for p in job.pods))
        room: dict[int, _Vec] = {}  # nodes this selection touched: their room now
        slots: dict[int, int] = {}
        at: dict[int, int] = {}  # where a touched node's next step starts
        serial: dict[int, int] = {}  # newest heap entry of a touched node
        heap: list[tuple[tuple[float, int, float, int], int, int]] = []
        steps: dict[int, _Step] = {}
        total = 0
        for n in self._slot_nodes(pool, envelope):
            free, step = self._first_step(pool, n, envelope, young_ok)
            total += free
            if step is not None:
                steps[n] = step
                heap.append((step.key, n, 0))
        heapify(heap)
        chosen: list[_Borrower] = []
        taken: set[int] = set()
        while total < len(job.pods) and heap:
            _, n, entry = heappop(heap)
            if entry != serial.get(n, 0):
                continue
            step = steps.pop(n)
            touched = {n}
            for victim in step.victims:
                chosen.append(victim)
                taken.add(victim.job.job_id)
                for m, v in victim.freed[pool.id].items():
                    if m not in room:
                        if not _fits(envelope, pool.cap[m]):
                            continue
                        room[m] = self._fut(pool, m)
                        slots[m] = _count(room[m], envelope)
                    room[m] = _add(room[m], v)
                    count = _count(room[m], envelope)
                    total, slots[m] = total + count - slots[m], count
                    touched.add(m)
            at[n] = step.end
            for m in sorted(touched):
                serial[m] = serial.get(m, 0) + 1
                following = self._step(pool, m, envelope, young_ok, room[m], at.get(m, 0), taken)
                if following is None:
                    steps.pop(m, None)
                else:
                    steps[m] = following
                    heappush(heap, (following.key, m, serial[m]))
        if total < len(job.pods):
            return None
        chosen.sort(key=lambda v: v.order)
        fit = _Fit(job.pods, base, pool.fut)
        for victim in chosen:
            fit.add(victim.freed[pool.id])
        return (chosen, fit) if fit.feasible() else None

    @staticmethod
    def _fut(pool: _Pool, n: int) -> _Vec:
        fut = pool.fut[n]
        return (fut[0], fut[1], fut[2])

    def _slot_nodes(self, pool: _Pool, envelope: _Vec) -> list[int]:
        """Nodes of the pool big enough for a slot, in id order (kept for the plan)."""
        key = (pool.id, envelope)
        nodes = self.slot_nodes.get(key)
        if nodes is None:
            nodes = self.slot_nodes[key] = sorted(
                n for n, cap in pool.cap.items() if _fits(envelope, cap))
        return nodes

    def _first_step(
        self, pool: _Pool, n: int, envelope: _Vec, young_ok: bool
    ) -> tuple[int, _Step | None]:
        """A node's free slots and its first step; cached until the node's room changes."""
        key = (n, envelope, young_ok)
        cached = self.first_steps.get(key)
        if cached is not None and cached[0] == pool.version[n]:
            return cached[1], cached[2]
        fut = self._fut(pool, n)
        free = _count(fut, envelope)
        step = self._step(pool, n, envelope, young_ok, fut, 0, set())
        self.first_steps[key] = (pool.version[n], free, step)
        return free, step

    def _step(self, pool: _Pool, n: int, envelope: _Vec, young_ok: bool, room: _Vec,
              start: int, taken: set[int]) -> _Step | None:
        """Node n's borrowers, from `start` on, to preempt for one more slot there."""
        slots = _count(room, envelope)
        victims: list[_Borrower] = []
        lost, priority, newest = 0.0, 0, -float("inf")
        candidates = self.victims_on.get(n, [])
        for i in range(start, len(candidates)):
            victim = candidates[i]
            if victim.claimed or victim.job.job_id in taken or (victim.young and not young_ok):
                continue
            victims.append(victim)
            lost += victim.lost
            priority += victim.job.priority
            newest = max(newest, victim.job.started_at)
            room = _add(room, victim.freed[pool.id][n])
            opened = _count(room, envelope) - slots
            if opened > 0:
                return _Step((lost / opened, priority, -newest, n), victims, i + 1)
        return None

    def _trim(
        self, job: _Pending, base: dict[int, _Vec], chosen: list[_Borrower], fit: _Fit
    ) -> tuple[list[_Borrower], _Fit]:
        pool = job.pool
        assert pool is not None
        used = set(_place_on(job.pods, fit.room) or ())
        touching = [v for v in chosen if used.intersection(v.freed[pool.id])]
        if len(touching) < len(chosen):
            narrower = _Fit(job.pods, base, pool.fut)
            for victim in touching:
                narrower.add(victim.freed[pool.id])
            if narrower.feasible():
                chosen, fit = touching, narrower
        dropped = True
        while dropped:
            dropped = False
            for victim in reversed(list(chosen)):
                fit.add(victim.freed[pool.id], sign=-1)
                if fit.feasible():
                    chosen.remove(victim)
                    dropped = True
                else:
                    fit.add(victim.freed[pool.id])
        return chosen, fit

    def _claim(self, victims: list[_Borrower]) -> None:
        """The victims' room (in every pool) counts as free for what comes after."""
        for victim in victims:
            victim.claimed = True
            for pool_id, freed in victim.freed.items():
                pool = self.pools[pool_id]
                for n, v in freed.items():
                    pool.release(n, v)
                    self.freeing_jobs.setdefault(n, set()).add(victim.job.job_id)

    def _hold(self, job: _Pending, nodes: list[int], reason: str) -> None:
        """Wait for the room, holding it in nodes and quota so nothing behind takes it."""
        pool = job.pool
        assert pool is not None
        for pod, n in zip(job.pods, nodes, strict=True):
            pool.reserve(n, pod)
        self._use(job, job.need)
        reserved = tuple(Placement(key=r.key, node_id=n, in_quota=True)
                         for r, n in zip(job.job.pods, nodes, strict=True))
        self._stuck(job, reason, reserved)

    def _preemption(self, victim: _Borrower, by: _Pending) -> Preemption:
        quota = by.quota
        assert quota is not None
        reason = (f"preempted by job {by.job.name} of quota {quota.name}, which reclaims its "
                  f"guaranteed resources; {victim.lost:,.0f} GPU-seconds of work since the "
                  f"last checkpoint lost")
        return Preemption(job_id=victim.job.job_id, by_job_id=by.job.job_id,
                          by_quota_id=quota.id, lost_gpu_seconds=victim.lost, reason=reason)

    def _waiting(self, jobs: list[_Pending]) -> tuple[Waiting, ...]:
        queues: dict[int, list[int]] = {}
        for job in jobs:
            if job.job.job_id in self.waits:
                queues.setdefault(job.job.quota_id, []).append(job.job.job_id)
        position = {jid: (i + 1, len(q)) for q in queues.values() for i, jid in enumerate(q)}
        out = []
        for job in jobs:
            jid = job.job.job_id
            if jid in self.waits:
                reason, reserved = self.waits[jid]
                out.append(Waiting(jid, reason, *position[jid], reserved=reserved))
        return tuple(out)
