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
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from functools import lru_cache

from apps.scheduler.engine.model import (
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
    quota_chains,
    vec,
)
from apps.scheduler.engine.reclaim import Borrower, Reclaimer, preemption
from apps.scheduler.engine.room import Pool
from apps.scheduler.engine.vectors import (
    Vec,
    add,
    amount,
    fits,
    grow,
    plural,
    shape,
    sub,
    sum_of,
    value,
)

_DEFAULT_CONFIG = Config()  # frozen: one instance serves as every call's default


def plan(snapshot: Snapshot, *, now: float, config: Config = _DEFAULT_CONFIG) -> Plan:
    """Decide which pending jobs start, which borrowers are preempted, and why the rest wait.

    Deterministic: the same snapshot, `now` and config give an equal plan.
    """
    state = ClusterState(snapshot.nodes, snapshot.quotas, snapshot.running, config=config)
    return _Planner(state, snapshot.pending, now=now).run()


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
        for job in running:
            self._add(job, built=False)
        for pool in self.pools.values():
            pool.build()

    def start(self, job: RunningJob) -> None:
        """A job now runs on its pods' nodes."""
        if job.job_id in self.running:
            raise SchedulerError(f"job {job.job_id} is already running")
        self._add(job, built=True)

    def stop(self, job_id: int) -> None:
        """A running job is gone and its room free."""
        job = self.running.pop(job_id)
        self.reclaimable.pop(job_id, None)
        self.frees.pop(job_id, None)
        self._count(job, sign=1)

    def update(self, job: RunningJob) -> None:
        """A running job changed (a checkpoint, being stopped): the same pods, new facts."""
        old = self.running.get(job.job_id)
        if old is not None and old.pods == job.pods and old.stopping == job.stopping:
            self.running[job.job_id] = job
            if job.job_id in self.reclaimable:
                self.reclaimable[job.job_id] = job
        else:
            if old is not None:
                self.stop(job.job_id)
            self.start(job)

    def plan(self, pending: Iterable[PendingJob], *, now: float) -> Plan:
        """A plan on the current state, which is left as it was."""
        pools = self.pools.values()
        for pool in pools:
            pool.journal = set()
        try:
            return _Planner(self, tuple(pending), now=now).run()
        finally:
            for pool in pools:
                pool.rollback()

    def _add(self, job: RunningJob, *, built: bool) -> None:
        if job.job_id in self.running:
            raise SchedulerError("duplicate running job ids in the snapshot")
        self.running[job.job_id] = job
        if job.idle_mode != "off" or job.stopping:
            self.reclaimable[job.job_id] = job
            self.frees[job.job_id] = self._frees(job)
        self._count(job, sign=-1, built=built)

    def _frees(self, job: RunningJob) -> tuple[dict[int, dict[int, Vec]], frozenset[int]]:
        freed: dict[int, dict[int, Vec]] = {}
        idle_pools = set()
        for pod in job.pods:
            pool = self.pool_of.get(pod.node_id)
            if pool is not None:
                on = freed.setdefault(pool.id, {})
                on[pod.node_id] = add(on.get(pod.node_id, (0, 0, 0)), vec(pod.resources))
            if not pod.in_quota and pod.node_id in self.node_pool_id:
                idle_pools.add(self.node_pool_id[pod.node_id])
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
            if chain and pod.in_quota:
                for quota in chain:
                    grow(self.usage[quota.id], (-sign * v[0], -sign * v[1], -sign * v[2]))


@lru_cache(maxsize=4096)  # a long queue repeats a few shapes against the same free room
def _needs_text(pods: tuple[Vec, ...], i: int, free: int, most: int) -> str:
    return (
        f"needs {shape(pods)} ({amount(i, free)} free in pool, "
        f"at most {amount(i, most)} on one node)"
    )


def _unique(what: str, ids: list[int]) -> None:
    if len(set(ids)) != len(ids):
        raise SchedulerError(f"duplicate {what} ids in the snapshot")


class _Pending:
    __slots__ = ("job", "key", "pods", "need", "quota", "chain", "pool")

    def __init__(self, job: PendingJob, planner: _Planner) -> None:
        self.job = job
        self.key = (-job.priority, job.submitted_at, job.job_id)
        self.pods = [vec(p.resources) for p in job.pods]
        self.need = sum_of(self.pods)
        self.quota = planner.quotas.get(job.quota_id)
        self.chain = planner.chains.get(job.quota_id, ())
        self.pool = planner.pools.get(self.quota.pool_id) if self.quota else None


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
        self.waits: dict[int, tuple[str, tuple[Placement, ...]]] = {}
        self.blockers: dict[int, _Pending] = {}  # StrictFIFO quota id -> first job stuck

    @property
    def reclaimer(self) -> Reclaimer:
        """The borrowers in victim order, read from the running jobs when first needed."""
        if self._reclaimer is None:
            self._reclaimer = self._load_borrowers()
        return self._reclaimer

    def _load_borrowers(self) -> Reclaimer:
        state, config = self.state, self.config
        reclaimer = Reclaimer(self.pools)
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
            reclaimer.add(borrower, idle_pools)
        reclaimer.sort()
        return reclaimer

    def run(self) -> Plan:
        jobs = sorted((_Pending(j, self) for j in self.pending), key=lambda j: j.key)
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
            free = sub(vec(quota.min), self.usage[quota.id])
            if not fits(job.need, free):
                i = next(i for i in range(3) if job.need[i] > free[i])
                own = job.chain[0].name
                where = own if quota is job.chain[0] else f"{quota.name} (ancestor of {own})"
                return (
                    f"quota {where}: needs {amount(i, job.need[i])}, "
                    f"{value(i, max(free[i], 0))} free"
                )
        return None

    def _split(self, job: _Pending) -> list[bool]:
        """Which pods of an acceptable job run In Quota: those the chain's free min holds."""
        free = [
            min(q.min.gpu - self.usage[q.id][0] for q in job.chain),
            min(q.min.cpu - self.usage[q.id][1] for q in job.chain),
            min(q.min.memory - self.usage[q.id][2] for q in job.chain),
        ]
        flags = []
        for pod in job.pods:
            held = fits(pod, free)
            if held:
                grow(free, (-pod[0], -pod[1], -pod[2]))
            flags.append(held)
        return flags

    def _use(self, job: _Pending, v: Vec) -> None:
        for quota in job.chain:
            grow(self.usage[quota.id], v)

    # -- decisions --

    def _admit(self, job: _Pending, nodes: list[int], in_quota: list[bool]) -> None:
        self._use(job, sum_of(p for p, flag in zip(job.pods, in_quota, strict=True) if flag))
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
        nodes = pool.place_future(job.pods)
        if nodes is not None:
            leaving = self.reclaimer.leaving(nodes)
            self._hold(job, nodes, f"room being freed by {plural(len(leaving), 'job')}")
            return
        for young_ok in (False, True):
            chosen = self.reclaimer.choose(job.pods, pool, young_ok=young_ok)
            if chosen is not None:
                break
        else:
            self._stuck(job, f"no node has room: {self._needs(job)}")
            return
        victims, nodes = chosen
        self.reclaimer.claim(victims)
        if young_ok:
            young = sum(v.young for v in victims)
            self._hold(
                job,
                nodes,
                (
                    f"borrowers to reclaim have run less than the minimum "
                    f"{self.config.min_run_seconds:g} s: {plural(young, 'job')}"
                ),
            )
            return
        for victim in victims:
            self.preemptions.append(preemption(victim, by=job.job, quota=quota))
        self._hold(job, nodes, f"borrowers being reclaimed: {plural(len(victims), 'job')}")

    def _hold(self, job: _Pending, nodes: list[int], reason: str) -> None:
        """Wait for the room, holding it in nodes and quota so nothing behind takes it."""
        pool = job.pool
        assert pool is not None
        for pod, n in zip(job.pods, nodes, strict=True):
            pool.reserve(n, pod)
        self._use(job, job.need)
        reserved = tuple(
            Placement(key=r.key, node_id=n, in_quota=True)
            for r, n in zip(job.job.pods, nodes, strict=True)
        )
        self._stuck(job, reason, reserved)

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
