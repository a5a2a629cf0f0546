"""Virtual time: a trace's jobs go through `apps.scheduler.engine.plan`, as the live tick sends
the database's, and what the plans decide is applied to an in-memory cluster.

Two modes:

- **replay**: jobs arrive at their trace times and leave when their work is done. A plan runs
  whenever something changed while jobs wait (an arrival, a departure, a backoff or a
  minimum run time ending), or at most once per `tick` seconds when a tick is set, as the
  live beat does. Preempted jobs go back to their queue (AIMaster) with the work since their
  last checkpoint lost, and wait out the requeue backoff.
- **fill** (the method of the FGD paper, USENIX ATC'23): jobs keep arriving in trace order,
  and nobody leaves; a job that cannot start when it arrives is dropped. The trace is
  inflated with seeded copies of its own jobs until the GPUs asked for reach `fill_to` times
  the capacity. Arrivals are planned in batches when one plan over a batch decides exactly
  what one plan per arrival would: with no job deferred to the engine's borrowers' pass
  (the engine walks the queue in arrival order, and room only shrinks); one at a time
  otherwise.

What the simulator decides itself is only what the trace leaves open: when plans run, how
long work takes, when checkpoints happen. Every scheduling decision is the engine's.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from apps.scheduler.engine import (
    ClusterState,
    Config,
    IdleMode,
    PendingJob,
    Placement,
    Plan,
    PodRequest,
    Resources,
    RunningJob,
    RunningPod,
    fragmentation,
    target_workload,
)
from apps.simulator.cluster import Cluster, assign_quota
from apps.simulator.policy import Policy, check_policies
from apps.simulator.spot import SpotFigures, SpotMarket, SpotSettings
from apps.simulator.trace import TraceJob

Mode = Literal["replay", "fill"]
MARKET_GRACE = 60  # market steps bidders still get once nothing else is left to happen
Progress = Callable[[int, int], None]  # (done, total)

DEFAULT_IDLE_MODES: Mapping[str, IdleMode] = {"LS": "off", "BE": "acceptable"}


@dataclass(frozen=True, slots=True)
class Settings:
    """What a run assumes where the trace says nothing. Seconds throughout."""

    mode: Mode = "replay"
    seed: int = 0
    quota_rule: str = "hash"
    idle_modes: Mapping[str, IdleMode] = field(default_factory=lambda: dict(DEFAULT_IDLE_MODES))
    checkpoint_interval: float = 1800.0  # 0: no checkpoints
    min_run_seconds: float = 60.0
    requeue_backoff: float = 10.0
    tick: float = 0.0  # 0: plan at every change
    speedup: float = 1.0  # replay: arrivals this many times closer together
    fill_to: float = 1.3
    shuffle: bool = False
    batch: int = 256
    spot: SpotSettings | None = None  # replay: some classes bid on a public pool instead
    gpu_sharing: bool = True  # a pod asking for part of a GPU shares one (else: a whole GPU)
    # replay, FGD placement: its workload is the mix of the pods that arrived in the last this
    # many hours of the trace (as the live tick reads the jobs submitted lately,
    # SCHEDULER_WORKLOAD_HOURS); 0: the whole trace's mix, known from the start
    workload_hours: float = 0.0


@dataclass(slots=True)
class Series:
    """One row per point in time (replay) or per arrival (fill)."""

    x: list[float] = field(default_factory=list)  # time (replay) or arrived share (fill)
    allocated: list[float] = field(
        default_factory=list
    )  # milli-GPU asked by running pods ÷ capacity
    occupied: list[int] = field(default_factory=list)  # GPUs with a pod on them
    running: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)  # so far
    lost_gpu_seconds: list[float] = field(default_factory=list)  # so far
    # FGD's expected fragmentation ÷ capacity: free GPU room the trace's pods could not use
    fragmented: list[float] = field(default_factory=list)


@dataclass(slots=True)
class JobOutcome:
    name: str
    qos: str
    quota: str
    submit: float
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    dropped: bool = False  # fill mode: could not start on arrival
    spot: bool = False  # bid on the public pool (Settings.spot), not on a quota
    nodes: tuple[int, ...] = ()  # engine node ids of its pods when it first started


@dataclass(slots=True)
class Result:
    policy: Policy
    mode: Mode
    capacity_gpus: int
    series: Series
    jobs: list[JobOutcome]
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    plan_calls: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    at_arrived: dict[float, float | None] = field(default_factory=dict)  # fill: share → ratio
    spot: SpotFigures | None = None


class _Job:
    """A trace job as the simulator tracks it between plans."""

    __slots__ = (
        "id",
        "trace",
        "quota_id",
        "idle_mode",
        "priority",
        "remaining",
        "started",
        "attempt",
        "checkpoints",
        "outcome",
        "share",
    )

    def __init__(
        self, jid: int, trace: TraceJob, quota: str, quota_id: int, idle_mode: IdleMode
    ) -> None:
        self.id = jid
        self.trace = trace
        self.quota_id = quota_id
        self.idle_mode: IdleMode = idle_mode
        self.priority = trace.priority
        self.remaining = trace.duration
        self.started = 0.0
        self.attempt = 0
        self.checkpoints = 0  # of the current attempt, as last shown to the engine
        self.outcome = JobOutcome(trace.name, trace.qos, quota, trace.submit)
        self.share = 0  # milli-GPUs of one shared GPU per pod; 0: whole GPUs

    @property
    def shape(self) -> Resources:
        t = self.trace
        return Resources(cpu=t.cpu, memory=t.memory, gpu=0 if self.share else t.gpu)

    @property
    def milli(self) -> int:
        return self.trace.gpu_milli * self.trace.pods

    @property
    def gpus(self) -> int:
        return 0 if self.share else self.trace.gpu * self.trace.pods

    def pending(self, *, submitted_at: float, not_before: float | None) -> PendingJob:
        t = self.trace
        shape, share = self.shape, self.share
        return PendingJob(
            job_id=self.id,
            name=t.name,
            quota_id=self.quota_id,
            idle_mode=self.idle_mode,
            priority=self.priority,
            submitted_at=submitted_at,
            pods=tuple(
                PodRequest(key=f"pod-{i}", resources=shape, gpu_milli=share) for i in range(t.pods)
            ),
            not_before=not_before,
        )


class _Cluster:
    """Jobs running and waiting, and the figures that follow them."""

    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        settings: Settings,
        traces: Sequence[TraceJob] = (),
    ) -> None:
        self.cluster = cluster
        self.capacity = cluster.gpus * 1000  # milli-GPU
        self.settings = settings
        self.config: Config = policy.config(
            seed=settings.seed, min_run_seconds=settings.min_run_seconds
        )
        target = workload(traces, settings)
        fgd = self.config.placement == "fgd"
        hours = settings.workload_hours if policy.workload_hours is None else policy.workload_hours
        self.window = hours * 3600 / settings.speedup if fgd else 0.0
        if fgd and not self.window:
            self.config = replace(self.config, workload=target)
        # the window's arrivals: (time, pod shape, pods), and the pods of each shape in it
        self.recent: deque[tuple[float, tuple[int, int], int]] = deque()
        self.recent_pods: dict[tuple[int, int], int] = {}
        interval = policy.checkpoint_interval
        self.interval = settings.checkpoint_interval if interval is None else interval
        self.state = ClusterState(cluster.nodes, cluster.quotas, config=self.config)
        self.fragmentation = _Fragmentation(self.state, target)
        self.checkpoints: list[tuple[float, int, int]] = []  # due time, job id, attempt
        self.running: dict[int, RunningJob] = {}
        self.pending: dict[int, PendingJob] = {}
        self.jobs: dict[int, _Job] = {}
        self.allocated = 0  # milli-GPU asked for by running jobs
        self.occupied = 0  # whole GPUs they hold
        self.preemptions = 0
        self.lost = 0.0
        self.plan_calls = 0
        self.pod_ids = 0
        self.shared: dict[tuple[int, int], int] = {}  # (node, GPU) -> milli-GPUs shared on it

    def plan(self, now: float) -> Plan:
        """The engine's plan on the cluster as it is now (kept between plans, not rebuilt)."""
        self.plan_calls += 1
        self._checkpoint(now)
        if self.window:
            recent, pods = self.recent, self.recent_pods
            while recent and recent[0][0] < now - self.window:  # as the live `since`
                _, shape, count = recent.popleft()
                pods[shape] -= count
            self.state.aim(target_workload((m, c, n) for (m, c), n in pods.items()))
        return self.state.plan(self.pending.values(), now=now)

    def arrive(self, job: _Job, now: float) -> None:
        """A quota job arrived: with a workload window, its pods join the window."""
        if self.window:
            milli, cpu, count = pods_of(job.trace, self.settings)
            self.recent.append((now, (milli, cpu), count))
            self.recent_pods[(milli, cpu)] = self.recent_pods.get((milli, cpu), 0) + count

    def _checkpoint(self, now: float) -> None:
        """Show the engine each borrower's latest checkpoint (only victims' lost work counts),
        for the borrowers whose next checkpoint has come."""
        due = self.checkpoints
        while due and due[0][0] <= now:
            _, jid, attempt = heapq.heappop(due)
            job = self.jobs[jid]
            running = self.running.get(jid)
            if running is None or job.attempt != attempt:
                continue
            done = int((now - job.started) // self.interval)
            if done <= job.checkpoints:  # rounding: not quite due yet
                heapq.heappush(due, (math.nextafter(now, math.inf), jid, attempt))
                continue
            job.checkpoints = done
            self.running[jid] = replace(
                running, last_checkpoint_at=job.started + done * self.interval
            )
            self.state.update(self.running[jid])
            heapq.heappush(due, (job.started + (done + 1) * self.interval, jid, attempt))

    def start(self, job: _Job, placements: Sequence[Placement], now: float) -> None:
        t = job.trace
        shape, share = job.shape, job.share
        pods = []
        for pl in placements:
            self.pod_ids += 1
            pods.append(RunningPod(self.pod_ids, pl.node_id, shape, pl.in_quota, share, pl.gpus))
            if share:
                self._share(pl.node_id, pl.gpus, share)
        job.attempt += 1
        job.started = now
        job.checkpoints = 0
        if job.outcome.first_start is None:
            job.outcome.first_start = now
            job.outcome.nodes = tuple(pl.node_id for pl in placements)
        self.pending.pop(job.id, None)
        self.running[job.id] = RunningJob(
            job_id=job.id,
            name=t.name,
            quota_id=job.quota_id,
            idle_mode=job.idle_mode,
            priority=job.priority,
            started_at=now,
            last_checkpoint_at=None,
            pods=tuple(pods),
        )
        self.state.start(self.running[job.id])
        self.fragmentation.touch(pl.node_id for pl in placements)
        if self.interval and job.idle_mode != "off":
            heapq.heappush(self.checkpoints, (now + self.interval, job.id, job.attempt))
        self.allocated += job.milli
        self.occupied += job.gpus

    def _share(self, node_id: int, gpus: tuple[int, ...], milli: int) -> None:
        """A shared pod arrives (milli > 0) on or leaves (< 0) its GPU: `occupied` counts
        the GPUs with something on them."""
        key = (node_id, gpus[0])
        was = self.shared.get(key, 0)
        now = was + milli
        self.occupied += (now > 0) - (was > 0)
        if now:
            self.shared[key] = now
        else:
            del self.shared[key]

    def stop(self, job: _Job) -> None:
        pods = self.running[job.id].pods
        if job.share:
            for pod in pods:
                self._share(pod.node_id, pod.gpus, -job.share)
        self.fragmentation.touch(pod.node_id for pod in pods)
        del self.running[job.id]
        self.state.stop(job.id)
        self.allocated -= job.milli
        self.occupied -= job.gpus

    def preempt(self, job: _Job, lost: float, now: float) -> None:
        """A victim stops now; its work up to the last checkpoint is kept."""
        self.stop(job)
        if job.remaining is not None and self.interval:
            saved = ((now - job.started) // self.interval) * self.interval
            job.remaining = max(0.0, job.remaining - saved)
        job.outcome.preemptions += 1
        job.outcome.lost_gpu_seconds += lost
        self.preemptions += 1
        self.lost += lost

    def apply(self, p: Plan, now: float) -> tuple[list[_Job], list[_Job]]:
        """Start the admitted jobs and stop the victims; returns (started, preempted)."""
        started, preempted = [], []
        for victim in p.preemptions:
            job = self.jobs[victim.job_id]
            if job.id in self.running:
                self.preempt(job, victim.lost_gpu_seconds, now)
                preempted.append(job)
        for admission in p.admissions:
            job = self.jobs[admission.job_id]
            self.start(job, admission.placements, now)
            started.append(job)
        return started, preempted


class _Fragmentation:
    """FGD's measure of the cluster as it is between plans: the sum over its nodes of the
    free GPU room the trace's pods could not use (the engine's `fragmentation`, weighed by
    the trace's own mix of pods), in milli-GPUs. Kept node by node: only the nodes jobs
    started or stopped on since it was last read are looked at again. Each node's figure is
    kept as a whole number of millionths of a milli-GPU, so that taking one out and putting
    another in never drifts (an allocated cluster reads 0, not -2e-17)."""

    SCALE = 10**6

    def __init__(self, state: ClusterState, target: Sequence[tuple[int, int, float]]) -> None:
        self.state = state
        self.target = tuple(target)
        self.known: dict[tuple[tuple[int, ...], int], int] = {}
        self.per_node: dict[int, int] = {}
        self.total = 0
        self.dirty: set[int] = {node.id for node in state.nodes}

    def touch(self, nodes: Iterable[int]) -> None:
        self.dirty.update(nodes)

    def milli(self) -> float:
        for n in sorted(self.dirty):
            use = self.state.gpu_use(n)
            if use is None:
                continue
            frag = self.known.get(use)
            if frag is None:
                frag = round(fragmentation(use[0], use[1], self.target) * self.SCALE)
                self.known[use] = frag
            self.total += frag - self.per_node.get(n, 0)
            self.per_node[n] = frag
        self.dirty.clear()
        return self.total / self.SCALE


def workload(traces: Sequence[TraceJob], settings: Settings) -> tuple[tuple[int, int, float], ...]:
    """FGD's target workload: the trace's mix of pods (the engine's `target_workload`). A
    fraction is whole GPUs without sharing."""
    return target_workload(pods_of(t, settings) for t in traces)


def pods_of(t: TraceJob, settings: Settings) -> tuple[int, int, int]:
    """How a job counts in FGD's workload: (milli-GPUs a pod asks for, its CPU, pods)."""
    return (t.share if settings.gpu_sharing and t.share else t.gpu * 1000, t.cpu, t.pods)


def make_jobs(
    traces: Sequence[TraceJob], cluster: Cluster, settings: Settings
) -> list[tuple[TraceJob, str, int, IdleMode]]:
    """Each trace job with its quota (name and id) and idle mode."""
    out = []
    for t in traces:
        quota = assign_quota(t, cluster, settings.quota_rule)
        quota_id = cluster.quota_id(quota)
        assert quota_id is not None
        mode: IdleMode = t.idle_mode or settings.idle_modes.get(t.qos, "off")  # type: ignore[assignment]
        out.append((t, quota, quota_id, mode))
    return out


def simulate(
    traces: Sequence[TraceJob],
    cluster: Cluster,
    policy: Policy,
    settings: Settings,
    *,
    progress: Progress | None = None,
) -> Result:
    """Run one policy over the trace."""
    wall, cpu = time.perf_counter(), time.process_time()
    if settings.mode == "fill" and settings.spot is not None:
        raise ValueError("spot bidding is a replay: fill mode has no time for prices to move")
    if settings.mode == "fill" and settings.workload_hours:
        raise ValueError("a workload window is a replay's: fill mode's arrivals have no times")
    check_policies([policy], settings.mode)
    if settings.mode == "fill":
        result = _fill(traces, cluster, policy, settings, progress)
    else:
        result = _replay(traces, cluster, policy, settings, progress)
    result.wall_seconds = time.perf_counter() - wall
    result.cpu_seconds = time.process_time() - cpu
    return result


# --- replay ---------------------------------------------------------------------------

# At one instant: arrivals, then departures, then a plan, then a market step.
_ARRIVE, _FINISH, _WAKE, _MARKET = 0, 1, 2, 3


def _replay(
    traces: Sequence[TraceJob],
    cluster: Cluster,
    policy: Policy,
    settings: Settings,
    progress: Progress | None,
) -> Result:
    state = _Cluster(cluster, policy, settings, traces)
    events: list[tuple[float, int, int, int, int]] = []  # time, kind, seq, job id, attempt
    seq = 0
    spot = settings.spot
    market = (
        SpotMarket(spot, seed=settings.seed, checkpoint_interval=state.interval) if spot else None
    )
    market_at: float | None = None  # the next market step queued
    quiet = 0  # market steps in a row with nothing else left to happen and no change
    for i, (t, quota, quota_id, mode) in enumerate(make_jobs(traces, cluster, settings)):
        if settings.speedup != 1.0:
            t = replace(t, submit=t.submit / settings.speedup)
        job = _Job(i + 1, t, quota, quota_id, mode)
        if settings.gpu_sharing:
            job.share = t.share
        state.jobs[job.id] = job
        events.append((t.submit, _ARRIVE, seq, job.id, 0))
        seq += 1
    heapq.heapify(events)
    series = Series()
    arrived = finished = 0
    planned_at: float | None = None  # a wake-up already queued for this time
    total = len(state.jobs)
    now = 0.0
    while events:
        now = events[0][0]
        dirty = moved = False  # a plan is due; something else changed (spot)
        while events and events[0][0] == now:
            _, kind, _, jid, attempt = heapq.heappop(events)
            if kind == _ARRIVE:
                job = state.jobs[jid]
                arrived += 1
                if market is not None and spot is not None and job.trace.qos in spot.classes:
                    job.outcome.spot, job.outcome.quota = True, "spot"
                    t = job.trace
                    bid = market.job(
                        jid, t.name, pods=t.pods, gpu=t.gpu, cpu=t.cpu, memory=t.memory, now=now
                    )
                    if bid is not None:
                        market.bid(bid)
                        if market_at is None:
                            market_at = _next_tick(now, spot.step)
                            heapq.heappush(events, (market_at, _MARKET, seq, 0, 0))
                            seq += 1
                    continue
                state.arrive(job, now)
                state.pending[jid] = job.pending(submitted_at=job.trace.submit, not_before=None)
                dirty = True
            elif kind == _MARKET:
                assert market is not None and spot is not None
                seq, stepped = _market_step(state, market, now, events, seq)
                moved = moved or stepped
                quiet = 0 if stepped or events else quiet + 1
                # Nothing else will happen (only one market step is ever queued): bidders
                # get MARKET_GRACE more steps to start; jobs without an end run no longer.
                over = not events and (not market.bidding or quiet >= MARKET_GRACE)
                market_at = now + spot.step if market.active and not over else None
                if market_at is not None:
                    heapq.heappush(events, (market_at, _MARKET, seq, 0, 0))
                    seq += 1
            elif kind == _FINISH and market is not None and jid in market.running:
                job = state.jobs[jid]
                if job.attempt == attempt:
                    market.finish(jid, now)
                    job.outcome.finish = now
                    finished += 1
                    moved = True
            elif kind == _FINISH:
                job = state.jobs[jid]
                if jid in state.running and job.attempt == attempt:
                    state.stop(job)
                    job.outcome.finish = now
                    finished += 1
                    dirty = True
            else:
                dirty = True
                if planned_at == now:
                    planned_at = None
        if dirty and state.pending:
            at = _next_tick(now, settings.tick)
            if at > now:
                if planned_at is None or planned_at > at:
                    heapq.heappush(events, (at, _WAKE, seq, 0, 0))
                    seq, planned_at = seq + 1, at
            else:
                seq = _plan_now(state, now, events, seq)
        if dirty or moved or not series.x:
            series.x.append(now)
            _record(series, state)
        if progress is not None:  # arrivals and departures: a job is half done once in
            progress(arrived + finished, 2 * total)
    result = _result(state, policy, settings, series)
    if market is not None:
        for jid in list(market.running):  # still running at the end: billed until then
            market.finish(jid, now)
        result.spot = market.figures
    return result


def _market_step(
    state: _Cluster, market: SpotMarket, now: float, events: list, seq: int
) -> tuple[int, bool]:
    """A market step: started spot jobs get their departure, reclaimed ones lose their work
    since the last checkpoint and bid again. True as well when a job started or stopped."""
    started, reclaimed = market.step(now)
    for bid in started:
        job = state.jobs[bid.id]
        job.attempt += 1
        if job.outcome.first_start is None:
            job.outcome.first_start = now
        if job.remaining is not None:
            heapq.heappush(events, (now + job.remaining, _FINISH, seq, job.id, job.attempt))
            seq += 1
    for bid, lost, kept in reclaimed:
        job = state.jobs[bid.id]
        if job.remaining is not None:
            job.remaining = max(0.0, job.remaining - kept)
        job.outcome.preemptions += 1
        job.outcome.lost_gpu_seconds += lost
    return seq, bool(started or reclaimed)


def _plan_now(state: _Cluster, now: float, events: list, seq: int) -> int:
    """Plan until no more victims are chosen: a reclaiming owner starts once its victims
    have gone, which in virtual time is the same instant."""
    settings = state.settings
    for _ in range(8):
        p = state.plan(now)
        started, preempted = state.apply(p, now)
        for job in started:
            if job.remaining is not None:
                heapq.heappush(events, (now + job.remaining, _FINISH, seq, job.id, job.attempt))
                seq += 1
        for job in preempted:
            backoff = settings.requeue_backoff
            state.pending[job.id] = job.pending(
                submitted_at=job.trace.submit, not_before=now + backoff if backoff else None
            )
            if backoff:
                heapq.heappush(events, (now + backoff, _WAKE, seq, 0, 0))
                seq += 1
        if not p.preemptions:
            break
    if not p.preemptions and any(w.reserved for w in p.waiting):
        # an owner waits for young borrowers: look again when the first comes of age
        ages = [
            r.started_at + state.config.min_run_seconds
            for r in state.running.values()
            if r.idle_mode != "off" and r.started_at + state.config.min_run_seconds > now
        ]
        if ages:
            heapq.heappush(events, (min(ages), _WAKE, seq, 0, 0))
            seq += 1
    return seq


def _next_tick(now: float, tick: float) -> float:
    return math.ceil(now / tick) * tick if tick > 0 else now


def _record(series: Series, state: _Cluster, allocated: float | None = None) -> None:
    """A point of the series: the cluster as it is now, but `allocated` (milli-GPUs) where
    the point stands for less than all that runs (fill: an arrival within its batch)."""
    capacity = state.capacity
    milli = state.allocated if allocated is None else allocated
    series.allocated.append(milli / capacity if capacity else 0.0)
    series.occupied.append(state.occupied)
    series.running.append(len(state.running))
    series.pending.append(len(state.pending))
    series.preemptions.append(state.preemptions)
    series.lost_gpu_seconds.append(state.lost)
    series.fragmented.append(state.fragmentation.milli() / capacity if capacity else 0.0)


def _result(state: _Cluster, policy: Policy, settings: Settings, series: Series) -> Result:
    return Result(
        policy=policy,
        mode=settings.mode,
        capacity_gpus=state.cluster.gpus,
        series=series,
        jobs=[job.outcome for job in state.jobs.values()],
        preemptions=state.preemptions,
        lost_gpu_seconds=state.lost,
        plan_calls=state.plan_calls,
    )


# --- fill -----------------------------------------------------------------------------


def inflate(traces: Sequence[TraceJob], *, gpus: int, settings: Settings) -> list[TraceJob]:
    """The trace in its order, then seeded copies of its jobs until the GPUs asked for reach
    `fill_to` × `gpus`; shuffled with the same seed if asked."""
    rng = random.Random(settings.seed)
    target = settings.fill_to * gpus * 1000
    out = list(traces)
    asked = sum(t.gpu_milli * t.pods for t in out)
    if any(t.gpu_milli for t in traces):
        k = 0
        while asked < target:
            t = rng.choice(traces)
            k += 1
            out.append(replace(t, name=f"{t.name}~{k}"))
            asked += t.gpu_milli * t.pods
    if settings.shuffle:
        rng.shuffle(out)
    return out


def _batchable(jobs: Sequence[_Job], cluster: Cluster) -> bool:
    """Whether one plan over many arrivals decides what one plan per arrival would. Not
    when some job may be deferred to the borrowers' pass (only_idle, or acceptable beyond
    its quota): that pass comes after every owner of the plan, not in arrival order."""
    if all(job.idle_mode == "off" for job in jobs):
        return True
    return len(cluster.quotas) == 1 and all(job.idle_mode != "only_idle" for job in jobs)


def _fill(
    traces: Sequence[TraceJob],
    cluster: Cluster,
    policy: Policy,
    settings: Settings,
    progress: Progress | None,
) -> Result:
    state = _Cluster(cluster, policy, settings, traces)
    arrivals = inflate(traces, gpus=cluster.gpus, settings=settings)
    jobs = []
    for i, (t, quota, quota_id, mode) in enumerate(make_jobs(arrivals, cluster, settings)):
        job = _Job(i + 1, t, quota, quota_id, mode)
        if settings.gpu_sharing:
            job.share = t.share
        job.priority = 1  # arrival order is the queue order
        state.jobs[job.id] = job
        jobs.append(job)
    capacity = cluster.gpus * 1000
    series = Series()
    asked = 0
    marks = sorted({1.0, settings.fill_to})
    at_arrived: dict[float, float | None] = dict.fromkeys(marks)
    step = max(1, settings.batch) if _batchable(jobs, cluster) else 1
    for first in range(0, len(jobs), step):
        batch = jobs[first : first + step]
        before = state.allocated
        for job in batch:
            state.pending[job.id] = job.pending(submitted_at=float(job.id), not_before=None)
        placed: set[int] = set()
        for _ in range(8):
            p = state.plan(0.0)
            started, preempted = state.apply(p, 0.0)
            placed.update(j.id for j in started)
            placed.difference_update(j.id for j in preempted)
            for job in preempted:  # tried again in this batch, dropped if it cannot start
                state.pending[job.id] = job.pending(submitted_at=float(job.id), not_before=None)
                before -= job.milli
            if not p.preemptions:
                break
        for jid in list(state.pending):
            state.jobs[jid].outcome.dropped = True
            del state.pending[jid]
        allocated = before
        # victims of earlier batches that started again here count from the batch's end
        again = state.allocated - before - sum(j.milli for j in batch if j.id in placed)
        for n, job in enumerate(batch, 1):
            if n == len(batch):
                allocated += again
            asked += job.milli
            if job.id in placed:
                allocated += job.milli
            share = asked / capacity if capacity else 0.0
            series.x.append(share)
            _record(series, state, allocated)
            for mark in marks:
                if at_arrived[mark] is None and share >= mark - 1e-12:
                    at_arrived[mark] = series.allocated[-1]
        if progress is not None:
            progress(min(first + step, len(jobs)), len(jobs))
    result = _result(state, policy, settings, series)
    result.at_arrived = at_arrived
    return result
