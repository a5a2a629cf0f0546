"""Victim choice: which borrowers an owner preempts to take its guaranteed room back.

A borrower is a running job with pods Not in Quota (idle mode "acceptable" or "only_idle")
that is not already being stopped. Victim order is least lost work first (GPU-seconds since
the last checkpoint, `lifecycle.lost_gpu_seconds`), then lower priority, then newest. The
planner (plan.py) decides when to reclaim and what the owner does meanwhile; this module
finds a minimal set of victims whose room holds the owner's gang.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from heapq import heapify, heappop, heappush

from apps.scheduler.engine.model import PendingJob, Preemption, Quota, RunningJob, VictimOrder
from apps.scheduler.engine.room import Pool, place_on
from apps.scheduler.engine.vectors import Vec, add, fits, how_many, low
from apps.scheduler.lifecycle import lost_gpu_seconds

_GREEDY_BUDGET = (8, 16)  # victims per pod, plus, before greedy reclaim turns to node by node


class Borrower:
    """A running job that could be preempted to give room back to an owner."""

    __slots__ = ("job", "lost", "order", "young", "claimed", "freed")

    def __init__(
        self,
        job: RunningJob,
        *,
        now: float,
        min_run: float,
        victim_order: VictimOrder = "least_lost_work",
        seed: int = 0,
    ) -> None:
        self.job = job
        self.lost = lost_gpu_seconds(
            gpus=sum(p.resources.gpu for p in job.pods),
            started_at=job.started_at,
            last_checkpoint_at=job.last_checkpoint_at,
            now=now,
        )
        # least lost work, then lower priority, then newest first
        self.order: tuple[float, ...] = (self.lost, job.priority, -job.started_at, job.job_id)
        if victim_order == "kueue":  # every candidate borrows: lowest priority, newest
            self.order = (job.priority, -job.started_at, job.job_id)
        elif victim_order == "random":
            self.order = (_shuffled(seed, job.job_id), job.job_id)
        self.young = now - job.started_at < min_run
        self.claimed = False
        self.freed: dict[int, dict[int, Vec]] = {}  # pool id -> node id -> room it frees


def _shuffled(seed: int, job_id: int) -> int:
    """A job's place in a fixed random order per seed (splitmix64: no state, no hash salt)."""
    z = (seed * 0x9E3779B97F4A7C15 + job_id + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def preemption(victim: Borrower, *, by: PendingJob, quota: Quota) -> Preemption:
    """The record of a victim preempted by an owner of `quota`, with the reason it shows."""
    reason = (
        f"preempted by job {by.name} of quota {quota.name}, which reclaims its "
        f"guaranteed resources; {victim.lost:,.0f} GPU-seconds of work since the "
        f"last checkpoint lost"
    )
    return Preemption(
        job_id=victim.job.job_id,
        by_job_id=by.job_id,
        by_quota_id=quota.id,
        lost_gpu_seconds=victim.lost,
        reason=reason,
    )


@dataclass(slots=True)
class _Step:
    """Borrowers to preempt on one node for one more slot (`Reclaimer._choose_by_node`)."""

    key: tuple[float, int, float, int]  # lost work per slot, priorities, -newest, node
    victims: list[Borrower]
    end: int  # where the node's next step starts in its candidate list


class Reclaimer:
    """The borrowers of one `plan` call, in victim order, and the choice among them.

    Filled while the planner loads the running jobs (`add`, `freeing_jobs`), then `sort`ed.
    """

    def __init__(self, pools: dict[int, Pool]) -> None:
        self.pools = pools
        self.freeing_jobs: dict[int, set[int]] = {}  # node id -> ids of jobs leaving it
        self.borrowers: dict[int, list[Borrower]] = {}  # pool id -> candidates, best first
        self.victims_on: dict[int, list[Borrower]] = {}  # node id -> candidates, best first
        self.first_steps: dict[tuple[int, Vec, bool], tuple[int, int, _Step | None]] = {}
        self.slot_nodes: dict[tuple[int, Vec], list[int]] = {}

    def add(self, borrower: Borrower, pool_ids: Iterable[int]) -> None:
        """A candidate in the pools where it runs Not in Quota."""
        for pool_id in pool_ids:
            self.borrowers.setdefault(pool_id, []).append(borrower)

    def sort(self) -> None:
        """Put the candidates in victim order, per pool and per node."""
        for pool_id, candidates in self.borrowers.items():
            candidates.sort(key=lambda b: b.order)
            for borrower in candidates:
                for n in borrower.freed.get(pool_id, {}):
                    self.victims_on.setdefault(n, []).append(borrower)

    def leaving(self, nodes: Iterable[int]) -> set[int]:
        """Ids of the jobs leaving these nodes."""
        return set().union(*(self.freeing_jobs.get(n, set()) for n in set(nodes)))

    def claim(self, victims: list[Borrower]) -> None:
        """The victims' room (in every pool) counts as free for what comes after."""
        for victim in victims:
            victim.claimed = True
            for pool_id, freed in victim.freed.items():
                pool = self.pools[pool_id]
                for n, v in freed.items():
                    pool.release(n, v)
                    self.freeing_jobs.setdefault(n, set()).add(victim.job.job_id)

    def choose(
        self, pods: list[Vec], pool: Pool, base: dict[int, Vec], *, young_ok: bool
    ) -> tuple[list[Borrower], list[int]] | None:
        """A minimal set of borrowers whose room, added to `base`, holds the gang `pods`,
        and the nodes the gang then goes to.

        Greedy over all candidates in victim order (least lost work, lower priority,
        newest) until the gang fits. When that takes more than a few victims per pod (the
        cheapest borrowers are scattered over many nodes), by node instead
        (`_choose_by_node`); and if that finds nothing, the greedy again, to the end. A
        pruning pass (`_trim`) then makes the set minimal: the gang does not fit without
        any one of the victims kept.
        """
        memo = (tuple(sorted(pods)), young_ok)
        if memo in pool.reclaim_failed:
            return None
        budget = _GREEDY_BUDGET[0] * len(pods) + _GREEDY_BUDGET[1]
        found, gave_up = self._choose_greedy(pods, pool, base, young_ok=young_ok, budget=budget)
        if gave_up:
            found = self._choose_by_node(pods, pool, base, young_ok=young_ok)
            if found is None:
                found, _ = self._choose_greedy(pods, pool, base, young_ok=young_ok, budget=None)
        if found is None:
            pool.reclaim_failed.add(memo)
            return None
        chosen, fit = _trim(pods, pool, base, *found)
        nodes = place_on(pods, fit.room)
        assert nodes is not None
        return chosen, nodes

    def _choose_greedy(
        self,
        pods: list[Vec],
        pool: Pool,
        base: dict[int, Vec],
        *,
        young_ok: bool,
        budget: int | None,
    ) -> tuple[tuple[list[Borrower], _Fit] | None, bool]:
        """Victims in victim order until the gang fits; True as well if it gave up at
        `budget` victims without knowing."""
        lo = low(pods)
        fit = _Fit(pods, base, pool.fut)
        chosen: list[Borrower] = []
        next_try = 0
        for victim in self.borrowers.get(pool.id, ()):
            freed = victim.freed.get(pool.id)
            if victim.claimed or (victim.young and not young_ok) or not freed:
                continue
            if not any(fits(lo, pool.cap[n]) for n in freed):
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
                if place_on(pods, fit.room) is not None:
                    break
                next_try = len(chosen) + max(1, len(chosen) // 4)
        else:
            if not fit.feasible():
                return None, False
        return (chosen, fit), False

    def _choose_by_node(
        self, pods: list[Vec], pool: Pool, base: dict[int, Vec], *, young_ok: bool
    ) -> tuple[list[Borrower], _Fit] | None:
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
        envelope = (max(p[0] for p in pods), max(p[1] for p in pods), max(p[2] for p in pods))
        room: dict[int, Vec] = {}  # nodes this selection touched: their room now
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
        chosen: list[Borrower] = []
        taken: set[int] = set()
        while total < len(pods) and heap:
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
                        if not fits(envelope, pool.cap[m]):
                            continue
                        room[m] = _fut(pool, m)
                        slots[m] = how_many(room[m], envelope)
                    room[m] = add(room[m], v)
                    count = how_many(room[m], envelope)
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
        if total < len(pods):
            return None
        chosen.sort(key=lambda v: v.order)
        fit = _Fit(pods, base, pool.fut)
        for victim in chosen:
            fit.add(victim.freed[pool.id])
        return (chosen, fit) if fit.feasible() else None

    def _slot_nodes(self, pool: Pool, envelope: Vec) -> list[int]:
        """Nodes of the pool big enough for a slot, in id order (kept for the plan)."""
        key = (pool.id, envelope)
        nodes = self.slot_nodes.get(key)
        if nodes is None:
            nodes = self.slot_nodes[key] = sorted(
                n for n, cap in pool.cap.items() if fits(envelope, cap)
            )
        return nodes

    def _first_step(
        self, pool: Pool, n: int, envelope: Vec, young_ok: bool
    ) -> tuple[int, _Step | None]:
        """A node's free slots and its first step; cached until the node's room changes."""
        key = (n, envelope, young_ok)
        cached = self.first_steps.get(key)
        if cached is not None and cached[0] == pool.version[n]:
            return cached[1], cached[2]
        fut = _fut(pool, n)
        free = how_many(fut, envelope)
        step = self._step(pool, n, envelope, young_ok, fut, 0, set())
        self.first_steps[key] = (pool.version[n], free, step)
        return free, step

    def _step(
        self,
        pool: Pool,
        n: int,
        envelope: Vec,
        young_ok: bool,
        room: Vec,
        start: int,
        taken: set[int],
    ) -> _Step | None:
        """Node n's borrowers, from `start` on, to preempt for one more slot there."""
        slots = how_many(room, envelope)
        victims: list[Borrower] = []
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
            room = add(room, victim.freed[pool.id][n])
            opened = how_many(room, envelope) - slots
            if opened > 0:
                return _Step((lost / opened, priority, -newest, n), victims, i + 1)
        return None


def _fut(pool: Pool, n: int) -> Vec:
    fut = pool.fut[n]
    return (fut[0], fut[1], fut[2])


def _trim(
    pods: list[Vec], pool: Pool, base: dict[int, Vec], chosen: list[Borrower], fit: _Fit
) -> tuple[list[Borrower], _Fit]:
    used = set(place_on(pods, fit.room) or ())
    touching = [v for v in chosen if used.intersection(v.freed[pool.id])]
    if len(touching) < len(chosen):
        narrower = _Fit(pods, base, pool.fut)
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


class _Fit:
    """Room for one reclaiming job while victim sets are tried.

    Keeps, for each distinct pod shape, how many such pods the room could hold node by
    node. For a gang of alike pods (the usual case) that count decides exactly; for a
    mixed gang it rules most sets out before a real placement is tried.
    """

    def __init__(self, pods: Sequence[Vec], base: dict[int, Vec], fut: dict[int, list[int]]):
        self.pods = pods
        self.shapes = sorted(Counter(pods).items())
        self.room = dict(base)
        self.fut = fut
        self.counts = [sum(how_many(r, s) for r in base.values()) for s, _ in self.shapes]

    def _room(self, n: int) -> Vec:
        r = self.room.get(n)
        return r if r is not None else (self.fut[n][0], self.fut[n][1], self.fut[n][2])

    def add(self, freed: dict[int, Vec], sign: int = 1) -> None:
        for n, v in freed.items():
            old = self._room(n)
            new = (old[0] + sign * v[0], old[1] + sign * v[1], old[2] + sign * v[2])
            self.room[n] = new
            for k, (shape, _) in enumerate(self.shapes):
                self.counts[k] += how_many(new, shape) - how_many(old, shape)

    def enough(self) -> bool:
        return all(c >= k for c, (_, k) in zip(self.counts, self.shapes, strict=True))

    def feasible(self) -> bool:
        if not self.enough():
            return False
        return len(self.shapes) == 1 or place_on(self.pods, self.room) is not None
