"""The planner: one pass over the queues of every quota, a `Plan` out.

How a pass runs (design.md §4):

1. Queue order is priority (high first), then submission time, then job id. Every quota is
   one queue; all queues are walked together in that order, so each quota's order holds.
2. **Owners' pass.** Every job that runs on its quota's guarantee is tried first:
   - a regular job (idle mode "off") needs free `min` for its whole request in its quota and
     in every ancestor, and room on the pool's nodes; all its pods are In Quota. When the
     quota has room but the nodes do not, it reclaims: it picks borrowers to preempt (see
     reclaim.py), and waits, holding the room those borrowers will leave, until they
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
5. GPU sharing: a pod may ask for part of one GPU (`PodRequest.gpu_milli`). Quotas count
   milli-GPUs (a whole GPU is 1000), so a 500-milli pod uses half a GPU of its quota's min.
   In a pool where some pod shares a GPU, every GPU is kept by its index (sharing.py) and
   every admitted pod is told which it takes; elsewhere GPUs are only counted.
6. A min lowered under what its quota's jobs run In Quota: the part above it is on loan
   (`ClusterState._on_loan`), counted Not in Quota and reclaimable like any borrower's,
   the newest jobs first; nothing is preempted until an owner short of its min reclaims.
   A loan the live tick has recorded reads Not in Quota on its pods from then on, and a
   regular job with pods Not in Quota stays reclaimable (`_lent`) until its quota's min,
   raised again, holds it: then it is back In Quota (`ClusterState._returned`).
"""

from __future__ import annotations

import gc
import random
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache

from apps.core.words import say, say_n
from apps.scheduler.engine.model import (
    MILLI,
    Admission,
    Config,
    Node,
    PendingJob,
    Placement,
    Plan,
    Preemption,
    Quota,
    RunningJob,
    SchedulerError,
    Snapshot,
    Waiting,
    check_share,
    milli_vec,
    quota_chains,
    vec,
)
from apps.scheduler.engine.reclaim import Borrower, Reclaimer, preemption
from apps.scheduler.engine.room import Pool
from apps.scheduler.engine.sharing import Shares, Spot, target_workload
from apps.scheduler.engine.vectors import (
    Vec,
    amount,
    fits,
    grow,
    milli_amount,
    milli_shape,
    milli_value,
    shape,
    sum_of,
)
from apps.scheduler.lifecycle import winding_down_reason

_DEFAULT_CONFIG = Config()  # frozen: one instance serves as every call's default


def plan(snapshot: Snapshot, *, now: float, config: Config = _DEFAULT_CONFIG) -> Plan:
    """Decide which pending jobs start, which borrowers are preempted, and why the rest wait.

    Deterministic: the same snapshot, `now` and config give an equal plan.
    """
    with collector_paused():
        state = ClusterState(snapshot.nodes, snapshot.quotas, snapshot.running, config=config)
        return _Planner(state, snapshot.pending, now=now).run()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a plan runs. A plan makes millions
    of small objects that live until it ends, and the collector's full passes over them
    cost a large plan 10–20% of its time for nothing: what a plan drops, reference
    counting frees, and any cycle left over is collected once it ends."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class ClusterState:
    """Nodes, quotas and running jobs between plans, with the room index kept as jobs start
    and stop: a caller that plans again and again (the simulator) tells it what changed,
    and a plan then costs what its queue and its decisions touch, not the whole cluster.
    `plan(snapshot)` is one of these built from the snapshot and planned on once.
    """

    def __init__(
        self,
        nodes: Iterable[Node],
        quotas: Iterable[Quota],
        running: Iterable[RunningJob] = (),
        *,
        config: Config = _DEFAULT_CONFIG,
    ) -> None:
        self.nodes = tuple(nodes)
        self.config = config
        quota_list = tuple(quotas)
        _unique("node", [n.id for n in self.nodes])
        _unique("quota", [q.id for q in quota_list])
        self.quotas = {q.id: q for q in quota_list}
        self.chains = quota_chains(self.quotas)
        by_pool: dict[int, list[Node]] = {}
        for node in self.nodes:
            if node.schedulable:
                by_pool.setdefault(node.pool_id, []).append(node)
        self.pools = {
            pid: Pool(pid, pool_nodes, placement=config.placement)
            for pid, pool_nodes in sorted(by_pool.items())
        }
        self.pool_of = {n: pool for pool in self.pools.values() for n in pool.cap}
        self.node_pool_id = {n.id: n.pool_id for n in self.nodes}
        self.usage: dict[int, list[int]] = {qid: [0, 0, 0] for qid in self.chains}
        self.running: dict[int, RunningJob] = {}
        # What victim choice reads: borrowers, and jobs being stopped (whose room is coming),
        # with the room each frees per pool and node and the pools where it borrows.
        self.reclaimable: dict[int, RunningJob] = {}
        self.frees: dict[int, tuple[dict[int, dict[int, Vec]], frozenset[int]]] = {}
        self.sharing: set[int] = set()  # pools where some running pod shares a GPU
        self.planning = False
        # In Quota pods above their quota chain's min (a min lowered under its jobs), counted
        # Not in Quota: job id -> the job as placed, and the ids of the pods now on loan
        self.placed: dict[int, RunningJob] = {}
        self.loans: dict[int, tuple[int, ...]] = {}
        self.returns: tuple[int, ...] = ()
        jobs = self._returned(tuple(running))
        if self._over_min(jobs):
            jobs = tuple(sorted(jobs, key=_keep_order))
        for job in jobs:
            self._add(job, built=False)
        # FGD weighs every GPU one by one, whether or not some pod shares one yet
        for pid in sorted(self.pools if config.placement == "fgd" else self.sharing):
            self.share(self.pools[pid])
        for pool in self.pools.values():
            pool.build()

    def start(self, job: RunningJob) -> None:
        """A job now runs on its pods' nodes."""
        if job.job_id in self.running:
            raise SchedulerError(f"job {job.job_id} is already running")
        for pod in job.pods:
            pool = self.pool_of.get(pod.node_id)
            if pod.gpu_milli and pool is not None and pool.shares is None:
                self.share(pool)
        self._add(job, built=True)

    def stop(self, job_id: int) -> None:
        """A running job is gone and its room free."""
        job = self.running.pop(job_id)
        self.placed.pop(job_id, None)
        self.loans.pop(job_id, None)
        self.reclaimable.pop(job_id, None)
        self.frees.pop(job_id, None)
        self._count(job, sign=1)

    def update(self, job: RunningJob) -> None:
        """A running job changed (a checkpoint, being stopped): the same pods, new facts."""
        old = self.running.get(job.job_id)
        placed = self.placed.get(job.job_id, old)
        if placed is not None and placed.pods == job.pods and placed.stopping == job.stopping:
            if placed is not old:  # on loan: the pods as counted, the new facts
                assert old is not None
                self.placed[job.job_id] = job
                job = replace(job, pods=old.pods)
            self.running[job.job_id] = job
            if job.job_id in self.reclaimable:
                self.reclaimable[job.job_id] = job
        else:
            if old is not None:
                self.stop(job.job_id)
            self.start(job)

    def aim(self, workload: tuple[tuple[int, int, float], ...]) -> None:
        """FGD's target workload from now on (`Config.workload`; the simulator's window of
        recent arrivals, as the live tick reads the jobs submitted lately)."""
        if workload != self.config.workload:
            self.config = replace(self.config, workload=workload)
            for pool in self.pools.values():
                if pool.shares is not None:
                    pool.shares.aim(workload)

    def plan(self, pending: Iterable[PendingJob], *, now: float) -> Plan:
        """A plan on the current state, which is left as it was."""
        pools = self.pools.values()
        for pool in pools:
            pool.journal = set()
            if pool.shares is not None:
                pool.shares.begin()
        self.planning = True
        try:
            with collector_paused():
                return _Planner(self, tuple(pending), now=now).run()
        finally:
            self.planning = False
            for pool in pools:
                pool.rollback()
                if pool.shares is not None:
                    pool.shares.rollback()

    def gpu_use(self, node_id: int) -> tuple[tuple[int, ...], int] | None:
        """A node as it is between plans: the milli-GPUs taken on each of its GPUs (sorted)
        and the CPU free there; None for a node no pool holds (not schedulable)."""
        pool = self.pool_of.get(node_id)
        if pool is None:
            return None
        now = pool.now[node_id]
        if pool.shares is None:
            size, free = max(pool.cap[node_id][0], 0), max(now[0], 0)
            return (0,) * free + (MILLI,) * (size - free), now[1]
        return pool.shares.signature(node_id), now[1]

    def share(self, pool: Pool) -> None:
        """From now on keep the pool's GPUs one by one: some pod shares one there. (In a
        plan too, for a pending share: the pool has no running one then, so its room stays
        as it is.)"""
        shares = pool.shares = Shares(pool, self.config.workload, seed=self.config.seed)
        shares.load(
            (p, job.stopping)
            for job in self.running.values()
            for p in job.pods
            if p.node_id in pool.cap
        )
        if self.planning:
            shares.begin()

    def _returned(self, jobs: tuple[RunningJob, ...]) -> tuple[RunningJob, ...]:
        """The jobs with the pods on loan that their quota chain's min holds again (an
        admin raised it since the loan was recorded) back In Quota (`returns`): after
        every pod In Quota is counted, the longest kept first (`_keep_order`)."""
        lent = [j for j in jobs if j.idle_mode == "off" and self._lent(j)]
        if not lent:
            return jobs
        use = {qid: [0, 0, 0] for qid in self.chains}
        for job in jobs:
            chain = self.chains.get(job.quota_id) if job.quota_id is not None else None
            for pod in job.pods:
                if chain and pod.in_quota:
                    for quota in chain:
                        grow(use[quota.id], milli_vec(pod.resources, pod.gpu_milli))
        back: dict[int, RunningJob] = {}
        returned: list[int] = []
        for job in sorted(lent, key=_keep_order):
            chain = self.chains[job.quota_id]  # type: ignore[index]  # _lent: a quota job
            flags = []
            for pod in job.pods:
                v = milli_vec(pod.resources, pod.gpu_milli)
                holds = pod.in_quota or all(
                    fits(sum_of((use[q.id], v)), milli_vec(q.min)) for q in chain
                )
                if holds and not pod.in_quota:
                    for quota in chain:
                        grow(use[quota.id], v)
                    returned.append(pod.pod_id)
                flags.append(holds)
            if not all(p.in_quota == f for p, f in zip(job.pods, flags, strict=True)):
                pods = tuple(replace(p, in_quota=f) for p, f in zip(job.pods, flags, strict=True))
                back[job.job_id] = replace(job, pods=pods)
        self.returns = tuple(sorted(returned))
        return tuple(back.get(j.job_id, j) for j in jobs)

    def _over_min(self, jobs: tuple[RunningJob, ...]) -> bool:
        """True when some quota's In Quota use, with its descendants', exceeds its min."""
        use = {qid: [0, 0, 0] for qid in self.chains}
        for job in jobs:
            chain = self.chains.get(job.quota_id) if job.quota_id is not None else None
            if chain:
                for pod in job.pods:
                    if pod.in_quota:
                        v = milli_vec(pod.resources, pod.gpu_milli)
                        for quota in chain:
                            grow(use[quota.id], v)
        return any(not fits(use[qid], milli_vec(quota.min)) for qid, quota in self.quotas.items())

    def _on_loan(self, job: RunningJob) -> RunningJob:
        """The job as quotas count it: each pod placed In Quota stays so while its quota
        chain's min, less what the jobs counted before it use, holds it; the rest is on loan
        (Not in Quota), reclaimable as any borrower is. Only a min lowered under its jobs'
        use (an admin's change) leaves pods on loan: a plan admits In Quota only what the
        free min holds."""
        chain = self.chains.get(job.quota_id) if job.quota_id is not None else None
        if not chain:
            return job
        usage = self.usage
        free: list[int] | None = None
        loaned: list[int] = []
        for pod in job.pods:
            if not pod.in_quota:
                continue
            if free is None:
                free = [
                    min(q.min.gpu * MILLI - usage[q.id][0] for q in chain),
                    min(q.min.cpu - usage[q.id][1] for q in chain),
                    min(q.min.memory - usage[q.id][2] for q in chain),
                ]
            v = milli_vec(pod.resources, pod.gpu_milli)
            if fits(v, free):
                grow(free, (-v[0], -v[1], -v[2]))
            else:
                loaned.append(pod.pod_id)
        if not loaned:
            return job
        self.placed[job.job_id] = job
        self.loans[job.job_id] = tuple(loaned)
        on_loan = set(loaned)
        pods = tuple(replace(p, in_quota=False) if p.pod_id in on_loan else p for p in job.pods)
        return replace(job, pods=pods)

    def _lent(self, job: RunningJob) -> bool:
        """A regular job runs Not in Quota only on loan: found so now, or in an earlier
        plan (the live tick records it on the pods, which then read Not in Quota)."""
        if job.job_id in self.loans:
            return True
        return job.quota_id is not None and any(not pod.in_quota for pod in job.pods)

    def _add(self, job: RunningJob, *, built: bool) -> None:
        if job.job_id in self.running:
            raise SchedulerError("duplicate running job ids in the snapshot")
        job = self._on_loan(job)
        self.running[job.job_id] = job
        if job.idle_mode != "off" or job.stopping or self._lent(job):
            self.reclaimable[job.job_id] = job
            self.frees[job.job_id] = self._frees(job)
        self._count(job, sign=-1, built=built)
        for pod in job.pods:
            if pod.gpu_milli:
                check_share(pod.gpu_milli, pod.resources, f"running pod {pod.pod_id}")
                pool = self.pool_of.get(pod.node_id)
                if pool is not None and not built:
                    self.sharing.add(pool.id)

    def _frees(self, job: RunningJob) -> tuple[dict[int, dict[int, Vec]], frozenset[int]]:
        freed: dict[int, dict[int, Vec]] = {}
        idle_pools = set()
        pool_of, node_pool_id = self.pool_of, self.node_pool_id
        for pod in job.pods:
            n = pod.node_id
            pool = pool_of.get(n)
            if pool is not None:
                r = pod.resources
                on = freed.get(pool.id)
                if on is None:
                    on = freed[pool.id] = {}
                old = on.get(n)
                on[n] = (
                    (r.gpu, r.cpu, r.memory)
                    if old is None
                    else (old[0] + r.gpu, old[1] + r.cpu, old[2] + r.memory)
                )
            if not pod.in_quota and n in node_pool_id:
                idle_pools.add(node_pool_id[n])
        return freed, frozenset(idle_pools)

    def _count(self, job: RunningJob, *, sign: int, built: bool = True) -> None:
        """Take (sign -1) or give back (+1) the job's room on its nodes and its quota use."""
        chain = self.chains.get(job.quota_id) if job.quota_id is not None else None
        for pod in job.pods:
            v = vec(pod.resources)
            pool = self.pool_of.get(pod.node_id)
            if pool is not None:
                if built:
                    pool.move(pod.node_id, (sign * v[0], sign * v[1], sign * v[2]), job.stopping)
                else:
                    pool.occupy(pod.node_id, v, leaving=job.stopping)
                if pool.shares is not None:
                    if sign < 0:
                        pool.shares.add(pod, job.stopping)
                    else:
                        pool.shares.remove(pod)
            if chain and pod.in_quota:
                g = -sign * (pod.gpu_milli or v[0] * MILLI)
                for quota in chain:
                    grow(self.usage[quota.id], (g, -sign * v[1], -sign * v[2]))


def _keep_order(job: RunningJob) -> tuple[bool, int, float, int]:
    """Which running jobs a lowered min keeps In Quota first: not being stopped, higher
    priority, then the longest running (the rest, on loan, are the newest)."""
    return (job.stopping, -job.priority, job.started_at, job.job_id)


# Why a job waits, as a code (the job's SubStatus; `Waiting.code`), beside the words.
BLOCKED = "BlockedByQueueHead"  # a StrictFIFO queue's head that cannot start holds it
SHORT = "ResourceInsufficient"  # no node (or idle room) holds the gang now
RECLAIM = "WaitingForReclaim"  # room held for it is being freed or taken back from borrowers


def _freed(leaving: int) -> str:
    return say_n(leaving, "room being freed by {count} job", "room being freed by {count} jobs")


def _reclaiming(victims: int) -> str:
    return say_n(
        victims, "borrowers being reclaimed: {count} job", "borrowers being reclaimed: {count} jobs"
    )


@lru_cache(maxsize=4096)  # a long queue repeats a few shapes against the same free room
def _needs_text(pods: tuple[Vec, ...], i: int, free: int, most: int) -> str:
    return say(
        "needs {shape} ({free} free in pool, at most {most} on one node)",
        shape=shape(pods),
        free=amount(i, free),
        most=amount(i, most),
    )


def _unique(what: str, ids: list[int]) -> None:
    if len(set(ids)) != len(ids):
        raise SchedulerError(f"duplicate {what} ids in the snapshot")


class _Pending:
    """A pending job as the planner sees it: `pods` as room on nodes (a shared pod's GPU
    being 0), `shares` the shared pods' milli-GPUs (None when none shares), `asks` and `ask`
    what quotas count (milli-GPUs), `whole` the pods as a reclaiming owner plans them (a
    share as one whole GPU)."""

    __slots__ = (
        "job",
        "key",
        "pods",
        "need",
        "shares",
        "asks",
        "ask",
        "whole",
        "quota",
        "chain",
        "pool",
    )

    def __init__(self, job: PendingJob, planner: _Planner) -> None:
        self.job = job
        self.key = (-job.priority, job.submitted_at, job.job_id)
        requests = job.pods
        if len(requests) == 1:  # the usual case, without the loops
            r = requests[0].resources
            need = (r.gpu, r.cpu, r.memory)
            self.pods = [need]
            shared = requests[0].gpu_milli
        else:
            self.pods = [vec(p.resources) for p in requests]
            need = sum_of(self.pods)
            shared = sum(p.gpu_milli for p in requests)
        self.need = need
        self.shares: list[int] | None = None
        self.asks: list[Vec] | None
        self.ask: Vec | None
        self.whole = self.pods
        if shared:
            for p in job.pods:
                check_share(p.gpu_milli, p.resources, f"job {job.name} pod {p.key}")
            self.shares = shares = [p.gpu_milli for p in job.pods]
            pairs = list(zip(self.pods, shares, strict=True))
            self.asks = [(s or v[0] * MILLI, v[1], v[2]) for v, s in pairs]
            self.ask = sum_of(self.asks)
            self.whole = [(1, v[1], v[2]) if s else v for v, s in pairs]
        else:
            self.asks = None  # `counted`: made when first needed
            self.ask = None  # `asked`: made when first needed
        self.quota = planner.quotas.get(job.quota_id)
        self.chain = planner.chains.get(job.quota_id, ())
        self.pool = pool = planner.pools.get(self.quota.pool_id) if self.quota else None
        if self.shares is not None and pool is not None and pool.shares is None:
            planner.state.share(pool)

    def asked(self) -> Vec:
        """The whole job as quotas count it, in milli-GPUs."""
        if self.ask is None:
            need = self.need
            self.ask = (need[0] * MILLI, need[1], need[2])
        return self.ask

    def counted(self) -> list[Vec]:
        """The pods as quotas count them, in milli-GPUs."""
        if self.asks is None:
            self.asks = [(v[0] * MILLI, v[1], v[2]) for v in self.pods]
        return self.asks


class _Planner:
    """State of one `plan` call. Room and usage are mutated as decisions are made (on the
    state's pools, which `ClusterState.plan` rolls back afterwards)."""

    def __init__(self, state: ClusterState, pending: tuple[PendingJob, ...], *, now: float):
        _unique("pending job", [j.job_id for j in pending])
        self.state = state
        self.pending = pending
        self.now = now
        self.config = config = state.config
        self.quotas = state.quotas
        self.chains = state.chains
        self.usage = {qid: use[:] for qid, use in state.usage.items()}
        self.pools = state.pools
        if config.placement == "random":
            rng = random.Random(f"{config.seed}:{now}")
            for pool in self.pools.values():
                pool.rng = rng

        self._reclaimer: Reclaimer | None = None
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.waits: dict[int, tuple[str, str, tuple[Placement, ...]]] = {}  # reason, code, room
        self.blockers: dict[int, _Pending] = {}  # StrictFIFO quota id -> first job stuck

    @property
    def reclaimer(self) -> Reclaimer:
        """The borrowers in victim order, read from the running jobs when first needed."""
        if self._reclaimer is None:
            self._reclaimer = self._load_borrowers()
        return self._reclaimer

    def _load_borrowers(self) -> Reclaimer:
        state, config = self.state, self.config
        reclaimer = Reclaimer(self.pools, per_slot=config.victim_order == "least_lost_work")
        for job in state.reclaimable.values():
            freed, idle_pools = state.frees[job.job_id]
            if job.stopping:
                for on in freed.values():
                    for n in on:
                        reclaimer.freeing_jobs.setdefault(n, set()).add(job.job_id)
                continue
            borrower = Borrower(
                job,
                now=self.now,
                min_run=config.min_run_seconds,
                victim_order=config.victim_order,
                seed=config.seed,
            )
            borrower.freed = freed  # read only: shared by every plan on the state
            if any(p.gpu_milli for p in job.pods):
                _credit(borrower, self.pools)
            reclaimer.add(borrower, idle_pools)
        reclaimer.sort()
        return reclaimer

    def run(self) -> Plan:
        jobs = sorted((_Pending(j, self) for j in self.pending), key=lambda j: j.key)
        if self.config.placement == "fgd" and not self.config.workload:
            mix = _workload(self.pending)
            for pool in self.pools.values():
                if pool.shares is not None:
                    pool.shares.aim(mix)
        deferred = [job for job in jobs if not self._owners_pass(job)]
        for job in deferred:
            self._borrowers_pass(job)
        loans = tuple(sorted(pod_id for pods in self.state.loans.values() for pod_id in pods))
        waiting = self._waiting(jobs)
        return Plan(
            tuple(self.admissions), tuple(self.preemptions), waiting, loans, self.state.returns
        )

    # -- the two passes --

    def _owners_pass(self, job: _Pending) -> bool:
        """Decide a job on its quota's guarantee; False defers it to the borrowers' pass."""
        pending = job.job
        if job.quota is None:
            self._wait(job, say("unknown quota {quota}", quota=pending.quota_id), "UnknownQuota")
            return True
        if not pending.pods:  # nothing to place is not "fits": it is never admitted
            self._wait(job, say("it has no pods to place"), "NoPods")
            return True
        if pending.not_before is not None and pending.not_before > self.now:
            left = pending.not_before - self.now
            self._wait(
                job, say("requeue backoff: {left} s left", left=f"{left:.0f}"), "RequeueBackoff"
            )
            return True
        if pending.winding_down:
            self._wait(job, winding_down_reason(pending.winding_down), "PreviousPodsExiting")
            return True
        if (blocker := self._blocker(job)) is not None:
            self._wait(job, say("blocked behind {job} (StrictFIFO)", job=blocker.job.name), BLOCKED)
            return True
        if pending.idle_mode == "only_idle":
            return False
        shortfall = self._shortfall(job)
        if pending.idle_mode == "acceptable":
            if shortfall is None and job.pool is not None:
                spots = self._place(job)
                if spots is not None:
                    self._admit(job, spots, [True] * len(spots))
                    return True
            return False
        if shortfall is not None:
            self._stuck(job, shortfall, "QuotaInsufficient")
        elif job.pool is None:
            self._stuck(
                job, say("no schedulable node in pool {pool}", pool=job.quota.pool_id), SHORT
            )
        elif (spots := self._place(job)) is not None:
            self._admit(job, spots, [True] * len(spots))
        else:
            self._reclaim(job)
        return True

    def _borrowers_pass(self, job: _Pending) -> None:
        if (blocker := self._blocker(job)) is not None:
            self._wait(job, say("blocked behind {job} (StrictFIFO)", job=blocker.job.name), BLOCKED)
            return
        if job.pool is None:
            assert job.quota is not None  # unknown quotas were settled in the owners' pass
            self._stuck(
                job, say("no schedulable node in pool {pool}", pool=job.quota.pool_id), SHORT
            )
            return
        acceptable = job.job.idle_mode == "acceptable"
        in_quota = self._split(job) if acceptable else [False] * len(job.pods)
        spots = self._place(job)
        if spots is None:
            self._stuck(job, say("no idle room: {needs}", needs=self._needs(job)), SHORT)
        else:
            self._admit(job, spots, in_quota)

    # -- quotas --

    def _shortfall(self, job: _Pending) -> str | None:
        """Why the quota chain cannot hold the whole job In Quota; None when it can."""
        need = job.need
        g = need[0] * MILLI if job.ask is None else job.ask[0]
        for quota in job.chain:
            use, low = self.usage[quota.id], quota.min
            if (
                g > low.gpu * MILLI - use[0]
                or need[1] > low.cpu - use[1]
                or need[2] > low.memory - use[2]
            ):
                ask = job.asked()
                free = (low.gpu * MILLI - use[0], low.cpu - use[1], low.memory - use[2])
                i = next(i for i in range(3) if ask[i] > free[i])
                own = job.chain[0].name
                needs, left = milli_amount(i, ask[i]), milli_value(i, max(free[i], 0))
                if quota is job.chain[0]:
                    return say(
                        "quota {quota}: needs {ask}, {free} free", quota=own, ask=needs, free=left
                    )
                return say(
                    "quota {quota} (ancestor of {own}): needs {ask}, {free} free",
                    quota=quota.name,
                    own=own,
                    ask=needs,
                    free=left,
                )
        return None

    def _split(self, job: _Pending) -> list[bool]:
        """Which pods of an acceptable job run In Quota: those the chain's free min holds."""
        free = [
            min(q.min.gpu * MILLI - self.usage[q.id][0] for q in job.chain),
            min(q.min.cpu - self.usage[q.id][1] for q in job.chain),
            min(q.min.memory - self.usage[q.id][2] for q in job.chain),
        ]
        flags = []
        for pod in job.counted():
            held = fits(pod, free)
            if held:
                grow(free, (-pod[0], -pod[1], -pod[2]))
            flags.append(held)
        return flags

    def _use(self, job: _Pending, v: Vec) -> None:
        for quota in job.chain:
            grow(self.usage[quota.id], v)

    # -- decisions --

    def _place(self, job: _Pending) -> list[Spot] | None:
        """Place the gang and take its room: each pod's node and GPUs, or None."""
        pool = job.pool
        assert pool is not None
        shares = pool.shares
        if job.shares is not None:
            assert shares is not None  # ClusterState.plan gave the pool its GPUs
            return shares.place(job.pods, job.shares)
        if shares is not None and pool.placement == "fgd":
            return shares.place(job.pods, [0] * len(job.pods))
        nodes = pool.place(job.pods)
        if nodes is None:
            return None
        if shares is None:
            return [(n, ()) for n in nodes]
        return [(n, shares.hold(n, v)) for n, v in zip(nodes, job.pods, strict=True)]

    def _admit(self, job: _Pending, spots: list[Spot], in_quota: list[bool]) -> None:
        self._use(job, sum_of(p for p, flag in zip(job.counted(), in_quota, strict=True) if flag))
        placements = tuple(
            Placement(key=request.key, node_id=n, in_quota=flag, gpus=gpus)
            for request, (n, gpus), flag in zip(job.job.pods, spots, in_quota, strict=True)
        )
        self.admissions.append(Admission(job_id=job.job.job_id, placements=placements))

    def _wait(
        self, job: _Pending, reason: str, code: str, reserved: tuple[Placement, ...] = ()
    ) -> None:
        self.waits[job.job.job_id] = (reason, code, reserved)

    def _stuck(
        self, job: _Pending, reason: str, code: str, reserved: tuple[Placement, ...] = ()
    ) -> None:
        """The job could not start: it waits, and in a StrictFIFO queue blocks those behind."""
        self._wait(job, reason, code, reserved)
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
        if job.shares is not None and pool.shares is not None:
            total, most = pool.shares.room()
            return say(
                "needs {shape} ({free} free in pool, at most {most} on one GPU)",
                shape=milli_shape(job.counted()),
                free=milli_amount(0, total),
                most=milli_amount(0, most),
            )
        i = 0 if job.need[0] else 1
        return _needs_text(tuple(job.pods), i, pool.free[i], pool.max_free(i))

    # -- reclaim --

    def _reclaim(self, job: _Pending) -> None:
        """A regular job with quota but no node room: take room back from borrowers.

        Room already on its way (jobs being stopped, victims of an earlier owner in this
        plan) is used first; then borrowers old enough to preempt; if only young borrowers
        would do, the job waits for them to reach the minimum run time. In every case the
        room it will use is held, in nodes and in quota, for the rest of this plan.
        """
        pool = job.pool
        quota = job.quota
        assert pool is not None and quota is not None
        if pool.shares is not None:
            self._reclaim_shared(job, pool, pool.shares, quota)
            return
        nodes = pool.place_future(job.whole)
        if nodes is not None:
            leaving = self.reclaimer.leaving(nodes)
            self._hold(job, nodes, _freed(len(leaving)))
            return
        for young_ok in (False, True):
            chosen = self.reclaimer.choose(job.whole, pool, young_ok=young_ok)
            if chosen is not None:
                break
        else:
            self._stuck(job, say("no node has room: {needs}", needs=self._needs(job)), SHORT)
            return
        victims, nodes = chosen
        self.reclaimer.claim(victims)
        if young_ok:
            young = sum(v.young for v in victims)
            self._hold(job, nodes, self._too_young(young))
            return
        for victim in victims:
            self.preemptions.append(preemption(victim, by=job.job, quota=quota))
        self._hold(job, nodes, _reclaiming(len(victims)))

    def _reclaim_shared(self, job: _Pending, pool: Pool, shares: Shares, quota: Quota) -> None:
        """`_reclaim` in a pool where GPUs are shared: on the `fut` room GPU by GPU."""
        cuts = job.shares or [0] * len(job.pods)
        chosen = None
        young_ok = False
        memo = tuple(sorted(zip(job.pods, cuts, strict=True)))
        for young_ok in (False, True):
            if (memo, young_ok) in shares.reclaim_failed:
                continue
            candidates = self.reclaimer.borrowers.get(pool.id, [])
            chosen = shares.choose(job.pods, cuts, candidates, young_ok=young_ok)
            if chosen is not None:
                break
            shares.reclaim_failed.add((memo, young_ok))
        if chosen is None:
            self._stuck(job, say("no node has room: {needs}", needs=self._needs(job)), SHORT)
            return
        victims, spots = chosen
        if not victims:
            leaving = self.reclaimer.leaving(n for n, _ in spots)
            reason = _freed(len(leaving))
        elif young_ok:
            young = sum(v.young for v in victims)
            reason = self._too_young(young)
        else:
            reason = _reclaiming(len(victims))
        if victims:
            self.reclaimer.claim(victims)
        if victims and not young_ok:
            for victim in victims:
                self.preemptions.append(preemption(victim, by=job.job, quota=quota))
        for pod, share, spot in zip(job.pods, cuts, spots, strict=True):
            shares.reserve(spot, pod, share)
        self._use(job, job.asked())
        reserved = tuple(
            Placement(key=r.key, node_id=n, in_quota=True, gpus=gpus if share else ())
            for r, share, (n, gpus) in zip(job.job.pods, cuts, spots, strict=True)
        )
        self._stuck(job, reason, RECLAIM, reserved)

    def _too_young(self, young: int) -> str:
        return say_n(
            young,
            "borrowers to reclaim have run less than the minimum {seconds} s: {count} job",
            "borrowers to reclaim have run less than the minimum {seconds} s: {count} jobs",
            seconds=f"{self.config.min_run_seconds:g}",
        )

    def _hold(self, job: _Pending, nodes: list[int], reason: str) -> None:
        """Wait for the room, holding it in nodes and quota so nothing behind takes it."""
        pool = job.pool
        assert pool is not None
        for pod, n in zip(job.whole, nodes, strict=True):
            pool.reserve(n, pod)
        self._use(job, job.asked())
        reserved = tuple(
            Placement(key=r.key, node_id=n, in_quota=True)
            for r, n in zip(job.job.pods, nodes, strict=True)
        )
        self._stuck(job, reason, RECLAIM, reserved)

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
                reason, code, reserved = self.waits[jid]
                out.append(Waiting(jid, reason, *position[jid], reserved=reserved, code=code))
        return tuple(out)


def _credit(borrower: Borrower, pools: dict[int, Pool]) -> None:
    """A borrower with shared pods: what preempting it frees counts, for victim choice,
    the GPUs its shares alone hold; its `returns` stay the room its pods give back (the
    GPUs they leave whole are told by sharing.py)."""
    borrower.returns = borrower.freed
    freed: dict[int, dict[int, Vec]] = {}
    for pid, on in borrower.freed.items():
        shares = pools[pid].shares
        credit = shares.whole_credit(borrower.job) if shares is not None else {}
        freed[pid] = {n: (v[0] + credit.get(n, 0), v[1], v[2]) for n, v in on.items()}
    borrower.freed = freed


def _workload(pending: Iterable[PendingJob]) -> tuple[tuple[int, int, float], ...]:
    """FGD's target workload when none is configured: the pending pods' mix."""
    return target_workload(
        (p.gpu_milli or p.resources.gpu * MILLI, p.resources.cpu, 1)
        for job in pending
        for p in job.pods
    )
