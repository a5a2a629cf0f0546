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

from apps.scheduler.engine.model import (
    Admission,
    Config,
    Node,
    PendingJob,
    Placement,
    Plan,
    Preemption,
    SchedulerError,
    Snapshot,
    Waiting,
    quota_chains,
    subtree_use,
    vec,
)
from apps.scheduler.engine.reclaim import Borrower, Reclaimer, preemption
from apps.scheduler.engine.room import Pool, place_on
from apps.scheduler.engine.vectors import (
    Vec,
    add,
    amount,
    fits,
    grow,
    low,
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
    return _Planner(snapshot, now=now, config=config).run()


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
    """State of one `plan` call. Room and usage are mutated as decisions are made."""

    def __init__(self, snapshot: Snapshot, *, now: float, config: Config) -> None:
        for what, ids in (
            ("node", [n.id for n in snapshot.nodes]),
            ("quota", [q.id for q in snapshot.quotas]),
            ("pending job", [j.job_id for j in snapshot.pending]),
        ):
            if len(set(ids)) != len(ids):
                raise SchedulerError(f"duplicate {what} ids in the snapshot")
        self.snapshot = snapshot
        self.now = now
        self.config = config
        self.quotas = {q.id: q for q in snapshot.quotas}
        self.chains = quota_chains(self.quotas)
        self.usage = subtree_use(self.chains, snapshot.running, in_quota=True)
        by_pool: dict[int, list[Node]] = {}
        for node in snapshot.nodes:
            if node.schedulable:
                by_pool.setdefault(node.pool_id, []).append(node)
        rng = random.Random(f"{config.seed}:{now}") if config.placement == "random" else None
        self.pools = {
            pid: Pool(pid, nodes, placement=config.placement, rng=rng)
            for pid, nodes in sorted(by_pool.items())
        }
        self.pool_of = {n: pool for pool in self.pools.values() for n in pool.cap}
        self.node_pool_id = {n.id: n.pool_id for n in snapshot.nodes}
        self.reclaimer = Reclaimer(self.pools)
        self._load_running()
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.waits: dict[int, tuple[str, tuple[Placement, ...]]] = {}
        self.blockers: dict[int, _Pending] = {}  # StrictFIFO quota id -> first job stuck

    def _load_running(self) -> None:
        for job in self.snapshot.running:
            borrower = Borrower(
                job,
                now=self.now,
                min_run=self.config.min_run_seconds,
                victim_order=self.config.victim_order,
                seed=self.config.seed,
            )
            idle_pools = set()
            for pod in job.pods:
                v = vec(pod.resources)
                pool = self.pool_of.get(pod.node_id)
                if pool is not None:
                    pool.occupy(pod.node_id, v, leaving=job.stopping)
                    freed = borrower.freed.setdefault(pool.id, {})
                    freed[pod.node_id] = add(freed.get(pod.node_id, (0, 0, 0)), v)
                    if job.stopping:
                        self.reclaimer.freeing_jobs.setdefault(pod.node_id, set()).add(job.job_id)
                if not pod.in_quota and pod.node_id in self.node_pool_id:
                    idle_pools.add(self.node_pool_id[pod.node_id])
            if job.idle_mode != "off" and not job.stopping:
                self.reclaimer.add(borrower, idle_pools)
        self.reclaimer.sort()
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
        return (
            f"needs {shape(job.pods)} ({amount(i, pool.free[i])} free in pool, "
            f"at most {amount(i, pool.max_free(i))} on one node)"
        )

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
        base = pool.future_room(low(job.pods)) if job.pods else {}
        nodes = place_on(job.pods, base)
        if nodes is not None:
            leaving = self.reclaimer.leaving(nodes)
            self._hold(job, nodes, f"room being freed by {plural(len(leaving), 'job')}")
            return
        for young_ok in (False, True):
            chosen = self.reclaimer.choose(job.pods, pool, base, young_ok=young_ok)
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
