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

from apps.core.words import say
from apps.scheduler.engine.model import (
    MILLI,
    PendingJob,
    Preemption,
    Quota,
    RunningJob,
    VictimOrder,
)
from apps.scheduler.engine.room import Pool, holds
from apps.scheduler.engine.vectors import _MANY, Vec, add, fits, low
from apps.scheduler.lifecycle import lost_gpu_seconds

_GREEDY_BUDGET = (8, 16)  # victims per pod, plus, before greedy reclaim turns to node by node


class Borrower:
    """A running job that could be preempted to give room back to an owner."""

    __slots__ = ("job", "lost", "order", "rank", "young", "claimed", "freed", "returns")

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
            gpus=sum(p.resources.gpu + p.gpu_milli / MILLI for p in job.pods),
            started_at=job.started_at,
            last_checkpoint_at=job.last_checkpoint_at,
            now=now,
        )
        # least lost work, then lower priority, then newest first
        self.order: tuple[float, ...] = (self.lost, job.priority, -job.started_at, job.job_id)
        if victim_order == "kueue":  # every candidate borrows: lowest priority, newest
            self.order = (job.priority, -job.started_at, job.job_id)
        elif victim_order == "random":
            self.order = (random_rank(seed, job.job_id), job.job_id)
        self.rank = 0  # its place in victim order among the plan's borrowers (`sort`)
        self.young = now - job.started_at < min_run
        self.claimed = False
        self.freed: dict[int, dict[int, Vec]] = {}  # pool id -> node id -> room it frees
        # what its pods give back, where that differs from `freed` (shared GPUs: plan.py)
        self.returns: dict[int, dict[int, Vec]] | None = None


def random_rank(seed: int, key: int) -> int:
    """A job's (or a node's) place in a fixed random order per seed (splitmix64: no state,
    no hash salt)."""
    z = (seed * 0x9E3779B97F4A7C15 + key + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def preemption(victim: Borrower, *, by: PendingJob, quota: Quota) -> Preemption:
    """The record of a victim preempted by an owner of `quota`, with the reason it shows.
    The reason says who took the room back, not the work lost: that is the restart's own
    figure, which a checkpoint saved in the grace period revises (LostWorkRevised), and the
    reason is copied to the pods, the events and the job, where it would go on saying the
    figure first counted."""
    reason = say(
        "preempted by job {job} of quota {quota}, which reclaims its guaranteed resources",
        job=by.name,
        quota=quota.name,
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

    # lost work per slot, priorities, -newest, node; in another victim order than least
    # lost work: the rank of the step's last victim, 0, 0, node
    key: tuple[float, int, float, int]
    victims: list[Borrower]
    end: int  # where the node's next step starts in its candidate list; -1: after victims[-1]


_Entry = tuple[tuple[float, int, float, int], int, int, _Step]  # key, node, version, step


class _FirstSteps:
    """Every slot node's first step for one (pool, envelope, young_ok), as a heap kept for
    the plan: an entry is current while its node's version is; the nodes whose room changed
    since `seen` (in the pool's change log) get a fresh entry before the heap is used."""

    __slots__ = ("heap", "nodes", "log", "seen")

    def __init__(self, heap: list[_Entry], nodes: set[int], log: list[int]) -> None:
        self.heap = heap
        self.nodes = nodes
        self.log = log
        self.seen = len(log)


class Reclaimer:
    """The borrowers of one `plan` call, in victim order, and the choice among them.

    Filled while the planner loads the running jobs (`add`, `freeing_jobs`), then `sort`ed.
    """

    def __init__(self, pools: dict[int, Pool], *, per_slot: bool = True) -> None:
        self.pools = pools
        # node-by-node steps cost lost work per slot (least lost work); else they follow
        # the victim order: a step costs its last victim's rank
        self.per_slot = per_slot
        self.freeing_jobs: dict[int, set[int]] = {}  # node id -> ids of jobs leaving it
        self.borrowers: dict[int, list[Borrower]] = {}  # pool id -> candidates, best first
        # node id -> candidates, best first, with the room each frees there (GPUs, CPU,
        # memory), its priority and start time
        self.victims_on: dict[int, list[tuple[Borrower, int, int, int, int, float]]] = {}
        self.first_steps: dict[tuple[int, Vec, bool], _FirstSteps] = {}
        # Next steps a node-by-node selection worked out, per heap, for the nodes whose room
        # it left as the claim of its victims leaves it: node -> (version then, step). They
        # stand for a fresh first step while the node's version is unchanged (`_first_steps`).
        self.settled: dict[tuple[int, Vec, bool], dict[int, tuple[int, _Step | None]]] = {}
        # the last selection's steps, until its victims are claimed (`claim`)
        self._selected: (
            tuple[tuple[int, Vec, bool], set[Borrower], dict[int, _Step | None]] | None
        ) = None
        self.unclaimed_from: dict[int, int] = {}  # pool id -> candidates before it are claimed
        # (pool id, pod shape, young_ok, budget) -> the greedy's first victims (`_gives_up`)
        self.ahead: dict[tuple[int, Vec, bool, int], _Ahead] = {}

    def add(self, borrower: Borrower, pool_ids: Iterable[int]) -> None:
        """A candidate in the pools where it runs Not in Quota."""
        for pool_id in pool_ids:
            self.borrowers.setdefault(pool_id, []).append(borrower)

    def sort(self) -> None:
        """Put the candidates in victim order, per pool and per node."""
        everyone = {id(b): b for candidates in self.borrowers.values() for b in candidates}
        for rank, borrower in enumerate(sorted(everyone.values(), key=lambda b: b.order)):
            borrower.rank = rank
        victims_on = self.victims_on
        for pool_id, candidates in self.borrowers.items():
            candidates.sort(key=lambda b: b.order)
            for borrower in candidates:
                job = borrower.job
                priority, started = job.priority, job.started_at
                for n, v in borrower.freed.get(pool_id, {}).items():
                    entry = (borrower, v[0], v[1], v[2], priority, started)
                    on = victims_on.get(n)
                    if on is None:
                        victims_on[n] = [entry]
                    else:
                        on.append(entry)

    def leaving(self, nodes: Iterable[int]) -> set[int]:
        """Ids of the jobs leaving these nodes."""
        return set().union(*(self.freeing_jobs.get(n, set()) for n in set(nodes)))

    def claim(self, victims: list[Borrower]) -> None:
        """The victims' room (in every pool) counts as free for what comes after; they
        are no longer candidates on their nodes."""
        touched: set[int] = set()
        for victim in victims:
            victim.claimed = True
            returns = victim.freed if victim.returns is None else victim.returns
            for pool_id, freed in returns.items():
                pool = self.pools[pool_id]
                for n, v in freed.items():
                    pool.release(n, v)
                    self.freeing_jobs.setdefault(n, set()).add(victim.job.job_id)
                if pool.shares is not None:
                    pool.shares.leave(victim.job)
                touched.update(freed)
        for n in touched:
            candidates = self.victims_on.get(n)
            if candidates:
                candidates[:] = [entry for entry in candidates if not entry[0].claimed]
        selected, self._selected = self._selected, None
        if selected is not None and selected[1] == set(victims):
            # the victims the selection took, no more, no fewer: its next steps are the
            # first steps of the nodes it worked them out for
            key, _, steps = selected
            version = self.pools[key[0]].version
            settled = self.settled.setdefault(key, {})
            for n, step in steps.items():
                settled[n] = (version[n], step)

    def choose(
        self, pods: list[Vec], pool: Pool, *, young_ok: bool
    ) -> tuple[list[Borrower], list[int]] | None:
        """A minimal set of borrowers whose room, added to the pool's `fut` room, holds the
        gang `pods`, and the nodes the gang then goes to.

        Greedy over all candidates in victim order (least lost work, lower priority,
        newest) until the gang fits. When that takes more than a few victims per pod (the
        cheapest borrowers are scattered over many nodes), by node instead
        (`_choose_by_node`); and if that finds nothing, the greedy again, to the end. A
        pruning pass (`_trim`) then makes the set minimal: the gang does not fit without
        any one of the victims kept.
        """
        self._selected = None
        memo = (tuple(sorted(pods)), young_ok)
        if memo in pool.reclaim_failed:
            return None
        budget = _GREEDY_BUDGET[0] * len(pods) + _GREEDY_BUDGET[1]
        found, gave_up = self._choose_greedy(pods, pool, young_ok=young_ok, budget=budget)
        if gave_up:
            found = self._choose_by_node(pods, pool, young_ok=young_ok)
            if found is None:
                found, _ = self._choose_greedy(pods, pool, young_ok=young_ok, budget=None)
        if found is None:
            pool.reclaim_failed.add(memo)
            return None
        chosen, fit = _trim(pods, pool, *found)
        nodes = fit.place()
        assert nodes is not None
        return chosen, nodes

    def _choose_greedy(
        self, pods: list[Vec], pool: Pool, *, young_ok: bool, budget: int | None
    ) -> tuple[tuple[list[Borrower], _Fit] | None, bool]:
        """Victims in victim order until the gang fits; True as well if it gave up at
        `budget` victims without knowing."""
        if budget is not None and self._gives_up(pods, pool, young_ok, budget):
            return None, True
        lo = low(pods)
        anywhere = fits(lo, pool.smallest)  # every node could take a pod of the gang
        fit = _Fit(pods, pool)
        chosen: list[Borrower] = []
        next_try = 0
        candidates = self.borrowers.get(pool.id, [])
        start = self.unclaimed_from.get(pool.id, 0)
        while start < len(candidates) and candidates[start].claimed:
            start += 1
        self.unclaimed_from[pool.id] = start
        for i in range(start, len(candidates)):
            victim = candidates[i]
            freed = _usable(victim, pool, lo, anywhere, young_ok)
            if freed is None:
                continue
            if budget is not None and len(chosen) == budget:
                return None, True
            chosen.append(victim)
            fit.add(freed)
            if not fit.enough():
                continue
            if len(fit.shapes) == 1:
                break
            if len(chosen) >= next_try:
                if fit.place() is not None:
                    break
                next_try = len(chosen) + max(1, len(chosen) // 4)
        else:
            if not fit.feasible():
                return None, False
        return (chosen, fit), False

    def _gives_up(self, pods: list[Vec], pool: Pool, young_ok: bool, budget: int) -> bool:
        """True when the greedy would give up at `budget` victims for this gang of alike
        pods: its first `budget` victims (kept for the plan, `_Ahead`) do not make room for
        the gang and another candidate follows. False when it might not (it then runs)."""
        shape = pods[0]
        if any(p != shape for p in pods):
            return False
        key = (pool.id, shape, young_ok, budget)
        ahead = self.ahead.get(key)
        if ahead is None or ahead.log is not pool.changes:
            ahead = self.ahead[key] = _Ahead(pool.changes)
        extra, gain = ahead.extra, ahead.gain
        dirty = set(pool.changes[ahead.seen :])
        ahead.seen = len(pool.changes)
        members = ahead.members
        if any(v.claimed for v in members):  # claimed since: no longer candidates
            for victim in members:
                if victim.claimed:
                    for n, v in victim.freed[pool.id].items():
                        e = extra[n]
                        extra[n] = (e[0] - v[0], e[1] - v[1], e[2] - v[2])
                        dirty.add(n)
            members[:] = [v for v in members if not v.claimed]
        candidates = self.borrowers.get(pool.id, [])
        anywhere = fits(shape, pool.smallest)
        following = None
        while ahead.next < len(candidates):
            victim = candidates[ahead.next]
            freed = _usable(victim, pool, shape, anywhere, young_ok)
            if freed is not None:
                if len(members) == budget:
                    following = victim
                    break
                members.append(victim)
                for n, v in freed.items():
                    e = extra.get(n, (0, 0, 0))
                    extra[n] = (e[0] + v[0], e[1] + v[1], e[2] + v[2])
                    dirty.add(n)
            ahead.next += 1
        fut = pool.fut
        for n in dirty:
            if (more := extra.get(n)) is not None:
                f = fut[n]
                now = holds((f[0] + more[0], f[1] + more[1], f[2] + more[2]), shape)
                now -= holds(f, shape)
                ahead.total += now - gain.get(n, 0)
                gain[n] = now
        return following is not None and pool.slots(shape) + ahead.total < len(pods)

    def _choose_by_node(
        self, pods: list[Vec], pool: Pool, *, young_ok: bool
    ) -> tuple[list[Borrower], _Fit] | None:
        """Victims picked node by node, cheapest pod slot first.

        A slot is room for the gang's envelope (its largest pod in every component), so as
        many slots as pods always hold the gang. Each node opens slots in steps: its
        borrowers, in victim order, until one more slot opens; a step costs their lost work
        per slot opened, then their priorities, then newest (in another victim order than
        least lost work, the place of its last victim in that order, so that Kueue's and
        the random order are kept node by node too). Steps are taken cheapest first
        until there are enough slots. A borrower taken for one node frees its room on its
        other nodes too, whose next steps are then recomputed. Every node's first step is
        kept in a heap for the plan (`_first_steps`) and only the nodes whose room changed
        are looked at again, so a queue of reclaiming owners does not rescan every borrower,
        or every node, of the pool each time. Nor are most of those: where the claim of the
        victims leaves a node as the selection saw it with them taken, the next step the
        selection worked out there is the node's first step (`claim`, `settled`).
        """
        envelope = (max(p[0] for p in pods), max(p[1] for p in pods), max(p[2] for p in pods))
        total = pool.slots(envelope)
        chosen: list[Borrower] = []
        if total < len(pods):
            chosen = self._take_steps(pods, pool, envelope, young_ok, total)
            if not chosen:
                return None
        chosen.sort(key=lambda v: v.order)
        fit = _Fit(pods, pool)
        for victim in chosen:
            fit.add(victim.freed[pool.id])
        return (chosen, fit) if fit.feasible() else None

    def _take_steps(
        self, pods: list[Vec], pool: Pool, envelope: Vec, young_ok: bool, total: int
    ) -> list[Borrower]:
        """The victims of the cheapest steps until `total` free slots reach the gang's
        size; empty when the steps run out first. The first steps it pops go back on their
        heap; a node this selection touched has its own next step, on a local heap."""
        first = self._first_steps(pool, envelope, young_ok).heap
        anywhere = fits(envelope, pool.smallest)
        version = pool.version
        room: dict[int, Vec] = {}  # nodes this selection touched: their room now
        slots: dict[int, int] = {}
        at: dict[int, int] = {}  # where a touched node's next step starts
        serial: dict[int, int] = {}  # newest local heap entry of a touched node
        local: list[tuple[tuple[float, int, float, int], int, int]] = []
        steps: dict[int, _Step] = {}  # touched nodes' next steps
        popped: list[_Entry] = []
        chosen: list[Borrower] = []
        taken: set[Borrower] = set()
        touched: set[int] = set()  # nodes whose next step is due, once another is needed
        while total < len(pods):
            for m in sorted(touched):
                serial[m] = serial.get(m, 0) + 1
                following = self._step(pool, m, envelope, young_ok, room[m], at.get(m, 0), taken)
                if following is None:
                    steps.pop(m, None)
                else:
                    steps[m] = following
                    heappush(local, (following.key, m, serial[m]))
            while first and (first[0][2] != version[first[0][1]] or first[0][1] in serial):
                entry = heappop(first)
                if entry[2] == version[entry[1]]:
                    popped.append(entry)
            while local and local[0][2] != serial[local[0][1]]:
                heappop(local)
            if first and (not local or first[0][:2] < local[0][:2]):
                entry = heappop(first)
                popped.append(entry)
                n, step = entry[1], entry[3]
            elif local:
                n = heappop(local)[1]
                step = steps.pop(n)
            else:
                break
            touched = {n}
            for victim in step.victims:
                chosen.append(victim)
                taken.add(victim)
                for m, v in victim.freed[pool.id].items():
                    if m not in room:
                        if not anywhere and not fits(envelope, pool.cap[m]):
                            continue
                        room[m] = _fut(pool, m)
                        slots[m] = holds(room[m], envelope)
                    room[m] = add(room[m], v)
                    count = holds(room[m], envelope)
                    total, slots[m] = total + count - slots[m], count
                    touched.add(m)
            at[n] = step.end if step.end >= 0 else _after(self.victims_on[n], step.victims[-1])
        for entry in popped:
            heappush(first, entry)
        if total < len(pods):
            return []
        # For `claim`: each node's next step, worked out on its room with every victim taken
        # (not for the nodes the last step changed, which were left to work out), and to be
        # found again in its candidate list, where the claim removes the victims before it.
        next_steps: dict[int, _Step | None] = {}
        for m in serial:
            if m not in touched:
                kept = steps.get(m)
                next_steps[m] = None if kept is None else _Step(kept.key, kept.victims, -1)
        self._selected = ((pool.id, envelope, young_ok), taken, next_steps)
        return chosen

    def _first_steps(self, pool: Pool, envelope: Vec, young_ok: bool) -> _FirstSteps:
        """The heap of first steps for this envelope, brought up to date with the pool."""
        key = (pool.id, envelope, young_ok)
        kept = self.first_steps.get(key)
        version = pool.version
        settled = self.settled.pop(key, {})
        none: set[Borrower] = set()
        if kept is None or kept.log is not pool.changes:
            nodes = {n for n, cap in pool.cap.items() if fits(envelope, cap)}
            heap: list[_Entry] = []
            for n in nodes:
                step = self._step(pool, n, envelope, young_ok, pool.fut[n], 0, none)
                if step is not None:
                    heap.append((step.key, n, version[n], step))
            heapify(heap)
            kept = self.first_steps[key] = _FirstSteps(heap, nodes, pool.changes)
            return kept
        heap = kept.heap
        for n in kept.nodes.intersection(pool.changes[kept.seen :]):
            known = settled.get(n)
            if known is not None and known[0] == version[n]:
                step = known[1]
            else:
                step = self._step(pool, n, envelope, young_ok, pool.fut[n], 0, none)
            if step is not None:
                heappush(heap, (step.key, n, version[n], step))
        kept.seen = len(pool.changes)
        if len(heap) > 2 * len(kept.nodes) + 64:
            heap[:] = [e for e in heap if e[2] == version[e[1]]]
            heapify(heap)
        return kept

    def _step(
        self,
        pool: Pool,
        n: int,
        envelope: Vec,
        young_ok: bool,
        room: Sequence[int],
        start: int,
        taken: set[Borrower],
    ) -> _Step | None:
        """Node n's borrowers, from `start` on, to preempt for one more slot there."""
        eg, ec, em = envelope
        g, c, m = room[0], room[1], room[2]
        slots = holds(room, envelope)
        # one more slot needs at least this room: below it there is no need to count slots
        ng, nc, nm = (slots + 1) * eg, (slots + 1) * ec, (slots + 1) * em
        victims: list[Borrower] = []
        lost, priority, newest = 0.0, 0, -float("inf")
        candidates = self.victims_on.get(n)
        if not candidates:
            return None
        too_young = not young_ok
        rest = candidates[start:] if start else candidates
        for i, (victim, vg, vc, vm, victim_priority, started) in enumerate(rest, start):
            if victim.claimed or (too_young and victim.young) or (taken and victim in taken):
                continue
            victims.append(victim)
            lost += victim.lost
            priority += victim_priority
            if started > newest:
                newest = started
            g += vg
            c += vc
            m += vm
            if g >= ng and c >= nc and m >= nm:
                opened = holds((g, c, m), envelope) - slots
                if opened > 0:
                    if not self.per_slot:
                        return _Step((float(victim.rank), 0, 0.0, n), victims, i + 1)
                    return _Step((lost / opened, priority, -newest, n), victims, i + 1)
        return None


def _usable(
    victim: Borrower, pool: Pool, lo: Vec, anywhere: bool, young_ok: bool
) -> dict[int, Vec] | None:
    """The room a candidate frees in the pool, if the greedy takes it for a gang whose
    smallest pod is `lo`: not claimed, old enough unless `young_ok`, and freeing room on a
    node that could take that pod (every node can when `anywhere`)."""
    freed = victim.freed.get(pool.id)
    if victim.claimed or (victim.young and not young_ok) or not freed:
        return None
    if not anywhere and not any(fits(lo, pool.cap[n]) for n in freed):
        return None  # frees nothing this gang could use
    return freed


class _Ahead:
    """The first victims the greedy takes for one gang shape, in victim order, kept for the
    plan with the slots their room adds to the pool's `fut` room, node by node (`gain`):
    brought up to date from the victims claimed since and the nodes whose room changed."""

    __slots__ = ("members", "next", "extra", "gain", "total", "log", "seen")

    def __init__(self, log: list[int]) -> None:
        self.members: list[Borrower] = []
        self.next = 0  # the first candidate not yet looked at
        self.extra: dict[int, Vec] = {}  # node -> the members' room there
        self.gain: dict[int, int] = {}  # node -> slots the members' room adds there
        self.total = 0
        self.log = log
        self.seen = len(log)


def _after(candidates: list[tuple[Borrower, int, int, int, int, float]], last: Borrower) -> int:
    """Where a node's next step starts: after this victim in its candidate list."""
    for i, entry in enumerate(candidates):
        if entry[0] is last:
            return i + 1
    raise AssertionError("a step's victim is among its node's candidates")


def _fut(pool: Pool, n: int) -> Vec:
    fut = pool.fut[n]
    return (fut[0], fut[1], fut[2])


def _trim(
    pods: list[Vec], pool: Pool, chosen: list[Borrower], fit: _Fit
) -> tuple[list[Borrower], _Fit]:
    used = set(fit.place() or ())
    touching = [v for v in chosen if used.intersection(v.freed[pool.id])]
    if len(touching) < len(chosen):
        narrower = _Fit(pods, pool)
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
    """Room for one reclaiming job while victim sets are tried: the pool's `fut` room with
    the tried victims' room added, held as `room` on the nodes they free only.

    Keeps, for each distinct pod shape, how many such pods the room could hold node by
    node. For a gang of alike pods (the usual case) that count decides exactly; for a
    mixed gang it rules most sets out before a real placement is tried.
    """

    def __init__(self, pods: Sequence[Vec], pool: Pool):
        self.pods = pods
        self.pool = pool
        self.shapes = sorted(Counter(pods).items())
        self.room: dict[int, Vec] = {}
        self.fut = pool.fut
        self.counts = [pool.slots(s) for s, _ in self.shapes]
        # one shape asking for some of everything (the usual gang): counted inline, with
        # each node's count kept
        shape = self.shapes[0][0] if len(self.shapes) == 1 else (0, 0, 0)
        self.alone = shape if shape[0] > 0 and shape[1] > 0 and shape[2] > 0 else None
        self.held: dict[int, int] = {}

    def place(self) -> list[int] | None:
        """Best fit of the gang on this room (`place_on`'s rule)."""
        return self.pool.place_future(self.pods, self.room)

    def add(self, freed: dict[int, Vec], sign: int = 1) -> None:
        room = self.room
        if self.alone is not None:
            sg, sc, sm = shape = self.alone
            held = self.held
            total = self.counts[0]
            for n, v in freed.items():
                old = room.get(n)
                if old is None:
                    fut = self.fut[n]
                    old = (fut[0], fut[1], fut[2])
                    before = holds(old, shape)
                else:
                    before = held[n]
                g, c, m = old[0] + sign * v[0], old[1] + sign * v[1], old[2] + sign * v[2]
                room[n] = (g, c, m)
                count = g // sg  # holds((g, c, m), shape), written out: this is hot
                k = c // sc
                if k < count:
                    count = k
                k = m // sm
                if k < count:
                    count = k
                count = 0 if count < 0 else _MANY if count > _MANY else count
                held[n] = count
                total += count - before
            self.counts[0] = total
            return
        counts, shapes = self.counts, self.shapes
        for n, v in freed.items():
            old = room.get(n)
            if old is None:
                fut = self.fut[n]
                old = (fut[0], fut[1], fut[2])
            new = (old[0] + sign * v[0], old[1] + sign * v[1], old[2] + sign * v[2])
            room[n] = new
            for k in range(len(shapes)):
                shape = shapes[k][0]
                counts[k] += holds(new, shape) - holds(old, shape)

    def enough(self) -> bool:
        counts, shapes = self.counts, self.shapes
        for k in range(len(shapes)):
            if counts[k] < shapes[k][1]:
                return False
        return True

    def feasible(self) -> bool:
        if not self.enough():
            return False
        return len(self.shapes) == 1 or self.place() is not None
