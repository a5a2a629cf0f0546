"""The live scheduler tick: load a snapshot from the database, plan with the pure engine,
apply the plan in one transaction.

Only quota jobs pass through here; public pay-as-you-go and spot jobs are placed by the
market. Every write is a compare-and-set on the job's status, so a replayed or concurrent
tick that planned from stale state changes nothing. Reads use `values_list` and writes are
bulk: a tick over ten thousand queued jobs must stay well under the tick interval.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from django.conf import settings
from django.db import transaction
from django.db.models import F

from apps.cluster.models import Node, Quota, ResourcePool
from apps.core.db import id_chunks, rows_update, transaction_lock
from apps.core.perf import gc_paused
from apps.core.words import joined, say, say_n
from apps.jobs.execution import (
    PodsStop,
    jobs_winding_down,
    pods_placed,
    pods_stopping_bulk,
    pods_winding_down,
    silent_before,
)
from apps.jobs.models import (
    ACTIVE_STATUSES,
    LIVE_POD_STATUSES,
    Checkpoint,
    IdleMode,
    Job,
    JobEvent,
    JobRestart,
    JobRole,
    JobStatus,
    Pod,
    PodStatus,
    ResourceSource,
    gpu_hours_text,
    gpu_indexes,
)
from apps.jobs.services import jobs_transition_bulk
from apps.scheduler import engine, lifecycle
from apps.scheduler.selectors import recent_workload

DEDICATED = ResourcePool.Kind.DEDICATED


@dataclass(frozen=True)
class TickReport:
    admitted: int
    preempted: int
    waiting: int


@dataclass(frozen=True)
class _Loaded:
    """The snapshot, plus what each pending job showed last time (to write only changes)."""

    snapshot: engine.Snapshot
    shown: dict[int, tuple[str, int | None, int | None, str]]


def resumed_events(*, jobs: list[Job], now: datetime) -> list[JobEvent]:
    """A "Resuming from checkpoint at step N" event (unsaved) for each job restarting after
    an interruption (attempt > 0): the step `lifecycle.resume_step` says its next attempt
    will load, worded by `lifecycle.resume_message` as the intent it is (the load, which
    runs later, may pass over a damaged file and say so), the checkpoints of all the jobs
    read in one query."""
    resumed = [job.pk for job in jobs if job.attempt > 0]
    if not resumed:
        return []
    recorded: dict[int, list[tuple[int, bool]]] = {pk: [] for pk in resumed}
    for job_id, saved, removed_at, damaged_at in Checkpoint.objects.filter(
        job_id__in=resumed
    ).values_list("job_id", "step", "removed_at", "damaged_at"):
        recorded[job_id].append((saved, removed_at is None and damaged_at is None))
    events = []
    for pk in resumed:
        message = lifecycle.resume_message(lifecycle.resume_step(recorded[pk]))
        events.append(JobEvent(job_id=pk, kind="Resumed", message=message, at=now))
    return events


def _ts(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def scheduler_snapshot(*, now: datetime | None = None) -> engine.Snapshot:
    """Read the dedicated pools, the quota tree, running quota jobs and the queue."""
    return _load(now=now).snapshot


def _load(*, now: datetime | None) -> _Loaded:
    pending, shown = _pending_jobs()
    if not pending and not _on_loan_exists():
        # nobody to place or reclaim for, and no loan to give back: the rest need not be read
        return _Loaded(
            snapshot=engine.Snapshot(nodes=(), quotas=(), running=(), pending=()), shown={}
        )
    nodes, quotas = scheduler_cluster(now=now)
    running = _running_jobs(live=True) + _running_jobs(live=False)
    return _Loaded(
        snapshot=engine.Snapshot(
            nodes=nodes, quotas=quotas, running=tuple(running), pending=pending
        ),
        shown=shown,
    )


def _on_loan_exists() -> bool:
    """Whether some regular job runs pods Not in Quota: on loan, which its quota's min,
    if raised since, may hold again."""
    return Pod.objects.filter(
        status__in=LIVE_POD_STATUSES,
        in_quota=False,
        job__idle_mode=IdleMode.OFF,
        job__quota__isnull=False,
    ).exists()


def scheduler_cluster(
    *, now: datetime | None = None
) -> tuple[tuple[engine.Node, ...], tuple[engine.Quota, ...]]:
    """The dedicated pools' nodes and the quota tree, as the engine takes them (the tick's
    snapshot and the What-if page's current configuration). With `now` and node agents, a
    Ready node whose agent has been silent too long (`silent_before`) takes no new pods:
    the watchdog is about to mark it Lost, and pods placed there would be lost with it."""
    silent = None
    if now is not None and settings.EXECUTION_BACKEND == "agent":
        silent = silent_before(now)
    nodes = tuple(
        engine.Node(
            id=pk,
            pool_id=pool_id,
            capacity=engine.Resources(cpu, memory, gpu),
            schedulable=status == Node.Status.READY
            and not (silent and beat is not None and beat < silent),
        )
        for pk, pool_id, cpu, memory, gpu, status, beat in Node.objects.filter(pool__kind=DEDICATED)
        .order_by("id")
        .values_list("id", "pool_id", "cpu", "memory", "gpu", "status", "last_heartbeat")
    )
    quotas = tuple(
        engine.Quota(
            id=pk,
            name=name,
            parent_id=parent_id,
            pool_id=pool_id,
            min=engine.Resources(cpu, memory, gpu),
            strategy=cast(engine.QueueStrategy, strategy),  # the field's choices
        )
        for pk, name, parent_id, pool_id, cpu, memory, gpu, strategy in Quota.objects.order_by(
            "id"
        ).values_list(
            "id",
            "name",
            "parent_id",
            "pool_id",
            "min_cpu",
            "min_memory",
            "min_gpu",
            "queue_strategy",
        )
    )
    return nodes, quotas


def _running_jobs(*, live: bool) -> list[engine.RunningJob]:
    """Jobs with pods on dedicated nodes. With live=False: the pods winding down
    (`pods_winding_down`: marked Preempted, Stopped or Failed, processes not yet exited),
    which hold their room until they exit. Those appear as one `stopping` job per job under
    a negative id, so the engine neither admits onto that room nor picks them as victims
    again (an owner waiting for it says "room being freed")."""
    pods = (
        Pod.objects.filter(status__in=LIVE_POD_STATUSES) if live else pods_winding_down()
    ).filter(node__isnull=False, node__pool__kind=DEDICATED)
    by_job: dict[int, list[engine.RunningPod]] = defaultdict(list)
    first_start: dict[int, datetime] = {}
    for pk, job_id, node_id, in_quota, started, cpu, memory, gpu, milli, ids in pods.values_list(
        "id",
        "job_id",
        "node_id",
        "in_quota",
        "started_at",
        "role__cpu",
        "role__memory",
        "role__gpu",
        "role__gpu_milli",
        "gpu_ids",
    ):
        by_job[job_id].append(
            engine.RunningPod(
                pod_id=pk,
                node_id=node_id,
                resources=engine.Resources(cpu, memory, gpu),
                in_quota=bool(in_quota),
                gpu_milli=milli,
                gpus=gpu_indexes(ids),
            )
        )
        if started and (job_id not in first_start or started < first_start[job_id]):
            first_start[job_id] = started
    jobs = (
        Job.objects.filter(id__in=list(by_job))
        .order_by("id")
        .values_list(
            "id",
            "display_name",
            "quota_id",
            "idle_mode",
            "priority",
            "status_changed_at",
            "last_checkpoint_at",
        )
    )
    return [
        engine.RunningJob(
            job_id=pk if live else -pk,
            name=name if live else f"{name} (stopping)",
            quota_id=quota_id,
            idle_mode=cast(engine.IdleMode, idle_mode),  # the field's choices
            priority=priority,
            # Lost work counts from this attempt's start, not the job's first start.
            started_at=(first_start.get(pk) or changed).timestamp(),
            last_checkpoint_at=_ts(checkpoint),
            pods=tuple(by_job[pk]),
            stopping=not live,
        )
        for pk, name, quota_id, idle_mode, priority, changed, checkpoint in jobs
    ]


def _pending_jobs() -> tuple[tuple[engine.PendingJob, ...], dict]:
    """The queuing quota jobs, then their roles. On PostgreSQL each statement sees what was
    committed when it began, so a job may change status between the two reads: one read
    without its roles is left for the next tick. (Read the other way round, a job that
    became Queuing in between was read with no pods, "fitted" at once and was admitted with
    none: EnvPreparing for ever.)"""
    queued = Job.objects.filter(status=JobStatus.QUEUING, resource_source=ResourceSource.QUOTA)
    rows = list(
        queued.order_by("id").values_list(
            "id",
            "display_name",
            "job_id",
            "quota_id",
            "idle_mode",
            "priority",
            "submitted_at",
            "not_before",
            "pending_reason",
            "queue_position",
            "queue_size",
            "sub_status",
        )
    )
    requests: dict[int, list[engine.PodRequest]] = defaultdict(list)
    for job_id, role_type, count, cpu, memory, gpu, milli in (
        JobRole.objects.filter(job__in=queued)
        .order_by("id")
        .values_list("job_id", "role_type", "pod_count", "cpu", "memory", "gpu", "gpu_milli")
    ):
        resources = engine.Resources(cpu, memory, gpu)
        requests[job_id] += [
            engine.PodRequest(key=f"{role_type.lower()}-{i}", resources=resources, gpu_milli=milli)
            for i in range(count)
        ]
    winding = jobs_winding_down(queued)
    pending, shown = [], {}
    for row in rows:
        pk, name, public_id, quota_id, idle_mode, priority, submitted, not_before, *previous = row
        if not requests[pk]:  # read before its roles were: next tick
            continue
        pending.append(
            engine.PendingJob(
                job_id=pk,
                name=f"{name} ({public_id})",  # its reasons name it for other workspaces too
                quota_id=quota_id,
                idle_mode=cast(engine.IdleMode, idle_mode),  # the field's choices
                priority=priority,
                submitted_at=submitted.timestamp(),
                pods=tuple(requests[pk]),
                not_before=_ts(not_before),
                winding_down=winding.get(pk, 0),
            )
        )
        shown[pk] = tuple(previous)
    return tuple(pending), shown


def scheduler_config(*, now: datetime) -> engine.Config:
    """The engine's rules as the settings choose them. FGD placement keeps room for the mix
    of quota pods submitted in the last SCHEDULER_WORKLOAD_HOURS (`recent_workload`)."""
    placement = cast(engine.PlacementRule, settings.SCHEDULER_PLACEMENT)  # checked there
    workload: tuple[tuple[int, int, float], ...] = ()
    if placement == "fgd":
        workload = recent_workload(since=now - timedelta(hours=settings.SCHEDULER_WORKLOAD_HOURS))
    return engine.Config(
        min_run_seconds=settings.SCHEDULER_MIN_RUN_SECONDS, placement=placement, workload=workload
    )


@gc_paused()
@transaction.atomic
def scheduler_tick(*, now: datetime) -> TickReport:
    """Plan and apply one scheduling pass. Call under the scheduler lock. A pass while
    another is in its transaction does nothing (`transaction_lock`): the Redis lock expired
    under a frozen holder, whose plan would otherwise meet this one's on the same room."""
    if not transaction_lock("scheduler-tick"):
        return TickReport(admitted=0, preempted=0, waiting=0)
    loaded = _load(now=now)
    shot = loaded.snapshot
    if not shot.pending and not any(
        job.idle_mode == "off" and not all(p.in_quota for p in job.pods) for job in shot.running
    ):
        # nobody to place or reclaim for, and no loan its quota's min may hold again
        return TickReport(admitted=0, preempted=0, waiting=0)
    plan = engine.plan(shot, now=now.timestamp(), config=scheduler_config(now=now))
    _record_loans(plan.loans, now=now)  # first: a victim on loan is preempted as one
    _record_returns(plan.returns, now=now)
    preempted = _apply_preemptions(plan.preemptions, now=now)
    admitted = _apply_admissions(plan.admissions, now=now)
    _record_waiting(plan.waiting, loaded.shown)
    return TickReport(admitted=admitted, preempted=preempted, waiting=len(plan.waiting))


def _record_loans(loans: tuple[int, ...], *, now: datetime) -> None:
    """The running pods the plan found on loan (their quota's min lowered under what its
    jobs use) are Not in Quota from now on, for the job page, the quotas page and every
    later plan, each job with an event saying why it may now be preempted."""

    def said(count: int, quota: str) -> str:
        return say_n(
            count,
            "{count} pod now runs Not in Quota: the min of quota {quota} was lowered"
            " below what its jobs use, and an owner short of its own may reclaim it",
            "{count} pods now run Not in Quota: the min of quota {quota} was lowered"
            " below what its jobs use, and an owner short of its own may reclaim them",
            quota=quota,
        )

    _mark_in_quota(loans, in_quota=False, kind="OnLoan", said=said, now=now)


def _record_returns(returns: tuple[int, ...], *, now: datetime) -> None:
    """The pods on loan that their quota's min holds again (an admin raised it) are In
    Quota from now on, each job with an event saying so."""

    def said(count: int, quota: str) -> str:
        return say_n(
            count,
            "{count} pod runs In Quota again: the min of quota {quota} holds it",
            "{count} pods run In Quota again: the min of quota {quota} holds them",
            quota=quota,
        )

    _mark_in_quota(returns, in_quota=True, kind="BackInQuota", said=said, now=now)


def _mark_in_quota(
    pod_ids: tuple[int, ...],
    *,
    in_quota: bool,
    kind: str,
    said: Callable[[int, str], str],
    now: datetime,
) -> None:
    """Mark these live pods In Quota or Not (those not so already), and tell each of their
    jobs with one event: `said(how many of its pods, its quota's name)`."""
    if not pod_ids:
        return
    pods: dict[int, int] = defaultdict(int)
    changed: list[tuple[int, bool]] = []
    for ids in id_chunks(sorted(pod_ids)):
        marked = Pod.objects.filter(
            pk__in=ids, in_quota=not in_quota, status__in=LIVE_POD_STATUSES
        ).values_list("pk", "job_id")
        for pk, job_id in marked:
            pods[job_id] += 1
            changed.append((pk, in_quota))
    if not changed:
        return
    rows_update(Pod, ["in_quota"], changed)
    jobs = Job.objects.filter(pk__in=list(pods)).select_related("quota").order_by("id")
    JobEvent.objects.bulk_create(
        [
            JobEvent(job=job, kind=kind, message=said(pods[job.pk], _quota_name(job)), at=now)
            for job in jobs
        ]
    )


def _apply_admissions(admissions: tuple[engine.Admission, ...], *, now: datetime) -> int:
    """Create the pods, move the jobs Queuing → EnvPreparing, tell the executor."""
    if not admissions:
        return 0
    planned = {a.job_id: a for a in admissions}
    jobs = list(
        Job.objects.select_for_update(of=("self",))
        .filter(pk__in=list(planned), status=JobStatus.QUEUING)
        .select_related("quota")
        .order_by("id")
    )
    if not jobs:
        return 0
    roles: dict[int, dict[str, JobRole]] = defaultdict(dict)
    for role in JobRole.objects.filter(job__in=jobs):
        roles[role.job_id][role.role_type.lower()] = role
    nodes = Node.objects.in_bulk({p.node_id for j in jobs for p in planned[j.pk].placements})
    pods = []
    for job in jobs:
        for placement in planned[job.pk].placements:
            role_key, _, index = placement.key.rpartition("-")
            pods.append(
                Pod(
                    job=job,
                    role=roles[job.pk][role_key],
                    index=int(index),
                    attempt=job.attempt,
                    pod_id=f"{job.job_id}-{placement.key}-a{job.attempt}",
                    node=nodes[placement.node_id],
                    in_quota=placement.in_quota,
                    status=PodStatus.PENDING,
                    # named where GPUs are shared; elsewhere the node agent names them
                    gpu_ids=",".join(map(str, placement.gpus)),
                )
            )
    Pod.objects.bulk_create(pods)
    dequeued = {job.pk: say("Dequeued from quota {quota}", quota=_quota_name(job)) for job in jobs}
    JobEvent.objects.bulk_create(_admission_events(jobs, planned, nodes, dequeued, now))
    jobs_transition_bulk(
        jobs=jobs,
        status=JobStatus.ENV_PREPARING,
        now=now,
        reason_code="JobDequeued",
        reason_messages=dequeued,
        started=True,  # started_at if unset; no backoff, reason or queue place any more
    )
    pods_placed(jobs=jobs, now=now)
    return len(jobs)


def _admission_events(jobs, planned, nodes, dequeued, now) -> list[JobEvent]:
    events = []
    for job in jobs:
        placed = Counter((nodes[p.node_id].name, p.in_quota) for p in planned[job.pk].placements)
        where = joined(
            [
                say("{node} ×{count} (In Quota)", node=name, count=count)
                if in_quota
                else say("{node} ×{count} (Not in Quota)", node=name, count=count)
                for (name, in_quota), count in sorted(placed.items())
            ]
        )
        events += [
            JobEvent(job=job, kind="Dequeued", message=dequeued[job.pk], at=now),
            JobEvent(
                job=job,
                kind="Scheduled",
                message=say("Scheduled on {message}", message=where),
                at=now,
            ),
        ]
    return events + resumed_events(jobs=jobs, now=now)


def _apply_preemptions(preemptions: tuple[engine.Preemption, ...], *, now: datetime) -> int:
    """Preempt the victims' live pods of their current attempt (Preempted, with the plan's
    reason), tell the executor, and let AIMaster requeue or fail each victim. A fixed
    number of queries however many victims: owners arriving reclaim thousands at once. The
    victims are locked in id order, as every batch of job locks is, so that concurrent
    writers cannot deadlock; one no longer active meanwhile is left alone."""
    if not preemptions:
        return 0
    planned = {p.job_id: p for p in preemptions}
    jobs = [
        job
        for ids in id_chunks(sorted(planned))
        for job in Job.objects.select_for_update()
        .filter(pk__in=ids, status__in=ACTIVE_STATUSES)
        .order_by("id")
    ]
    if not jobs:
        return 0
    pods: dict[int, list[Pod]] = defaultdict(list)
    for ids in id_chunks([job.pk for job in jobs]):
        for pod in Pod.objects.filter(
            job_id__in=ids, attempt=F("job__attempt"), status__in=LIVE_POD_STATUSES
        ):
            pods[pod.job_id].append(pod)
    rows_update(
        Pod,
        ["status", "reason", "message", "finished_at"],
        [
            (pod.pk, PodStatus.PREEMPTED, "Preempted", planned[job.pk].reason, now)
            for job in jobs
            for pod in pods[job.pk]
        ],
    )
    pods_stopping_bulk(
        stops=[PodsStop(job=job, pods=pods[job.pk], reason=planned[job.pk].reason) for job in jobs],
        now=now,
    )
    JobEvent.objects.bulk_create(
        [
            JobEvent(job=job, kind="Preempted", message=planned[job.pk].reason, at=now)
            for job in jobs
        ]
        + [  # and on each pod, for its own events (GetPodEvents)
            JobEvent(job=job, pod=pod, kind="PodPreempted", message=planned[job.pk].reason, at=now)
            for job in jobs
            for pod in pods[job.pk]
        ]
    )
    jobs_requeue_or_fail(
        interruptions=[
            Interruption(
                job, "JobPreempted", planned[job.pk].reason, planned[job.pk].lost_gpu_seconds
            )
            for job in jobs
        ],
        now=now,
    )
    return len(jobs)


@dataclass(frozen=True)
class Interruption:
    """A job that lost its pods: the cause (its ReasonCode), in words, and the GPU-seconds
    computed since its last checkpoint. `kind` (`lifecycle.Interruption`): a quota's owner or
    the spot market took the pods back (`reclaim`), the platform did (`platform`: a node lost
    or drained, an agent restarted or stopped), or a failure of the job's own (`failure`)."""

    job: Job
    cause: str
    message: str
    lost_gpu_seconds: float
    kind: lifecycle.Interruption = "reclaim"


def pods_lost_gpu_seconds(
    *,
    job: Job,
    pods: Iterable[Pod],
    now: datetime,
    checkpoint_at: datetime | None = None,
    from_start: bool = False,
) -> float:
    """The work an interruption at `now` throws away (`lifecycle.lost_gpu_seconds`): each
    pod's GPU-seconds since the job's last checkpoint (or `checkpoint_at`, the one the next
    attempt resumed from; none with `from_start`) or its own start, up to its end if it has
    ended; a pod that never started lost nothing."""
    checkpoint = None if from_start else _ts(checkpoint_at or job.last_checkpoint_at)
    lost = 0.0
    for pod in pods:
        if pod.started_at is not None:
            lost += lifecycle.lost_gpu_seconds(
                gpus=float(pod.role.gpus),
                started_at=pod.started_at.timestamp(),
                last_checkpoint_at=checkpoint,
                now=(pod.finished_at or now).timestamp(),
            )
    return lost


def ended_message(*, message: str, reason: str, lost_gpu_seconds: float) -> str:
    """What the Failed event of an interruption that ended the job says (a preemption or a
    reclaim without AIMaster, a failure of its own with no restart left or that its restart
    policy does not retry): the interruption, why AIMaster does not go on, and the work it
    lost (`pods_lost_gpu_seconds`), as a requeue's event says what it lost. The job's
    reason (GetJob's ReasonMessage) is the same without the work lost, which a checkpoint
    reported a moment later may still revise (LostWorkRevised). The scheduler, the market
    and the agent all word it here."""
    return say(
        "{message} ({reason}); lost {lost} GPU-hours",
        message=message,
        reason=reason,
        lost=gpu_hours_text(lost_gpu_seconds),
    )


def aimaster_budget(job: Job) -> lifecycle.Budget:
    """The job's AIMaster switch and restarts, for `lifecycle` to judge."""
    return lifecycle.Budget(
        aimaster=job.enable_aimaster, max_restarts=job.max_restarts, restart_times=job.restart_times
    )


def job_requeue_or_fail(
    *,
    job: Job,
    now: datetime,
    cause: str,
    message: str,
    lost_gpu_seconds: float,
    requeue_status: str | None = None,
    kind: lifecycle.Interruption = "reclaim",
) -> None:
    """AIMaster for one job (see `jobs_requeue_or_fail`)."""
    jobs_requeue_or_fail(
        interruptions=[Interruption(job, cause, message, lost_gpu_seconds, kind)],
        now=now,
        requeue_status=requeue_status,
    )


def jobs_requeue_or_fail(
    *,
    interruptions: list[Interruption],
    now: datetime,
    requeue_status: str | None = None,
) -> None:
    """AIMaster, as `lifecycle.after_interruption` decides: requeue each job (keeping its
    queue position, after a backoff) — a preemption or a reclaim whatever its budget and
    without spending it, a failure of its own while restarts remain, spending one; otherwise,
    or without fault tolerance, it ends Failed with its cause as ReasonCode and the work it
    lost kept on the job (`ended_lost_gpu_seconds`). A platform interruption is always
    requeued, at once (no backoff: the job did nothing to thrash), without spending a
    restart. Each requeue is a JobRestart (counted or not) with the work it lost.
    A spot job goes back to Bidding, the rest to Queuing (`requeue_status`, when given,
    says where instead). Each requeue starts a new attempt. A fixed number of queries
    however many jobs; the caller locks them."""
    requeued: list[tuple[Interruption, lifecycle.Requeue]] = []
    failed: list[tuple[Interruption, lifecycle.Fail]] = []
    for i in interruptions:
        decision = lifecycle.after_interruption(
            budget=aimaster_budget(i.job),
            kind=i.kind,
            spot=i.job.resource_source == ResourceSource.SPOT,
        )
        if isinstance(decision, lifecycle.Fail):
            failed.append((i, decision))
        else:
            requeued.append((i, decision))
    backoff = now + timedelta(seconds=settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS)
    events, restarts, messages = [], [], {}
    back: dict[str, list[Interruption]] = defaultdict(list)
    for i, decision in requeued:
        job = i.job
        status = requeue_status or (JobStatus.BIDDING if decision.rebid else JobStatus.QUEUING)
        back[status].append(i)
        bidding = status == JobStatus.BIDDING
        job.attempt += 1
        if decision.counted:
            job.restart_times += 1
        job.not_before = backoff if decision.backoff else None
        restarts.append(
            JobRestart(
                job=job,
                number=job.attempt,
                at=now,
                cause=i.cause,
                message=i.message,
                lost_gpu_seconds=i.lost_gpu_seconds,
                counted=decision.counted,
            )
        )
        lost = gpu_hours_text(i.lost_gpu_seconds)
        if not decision.counted:
            note = (
                lifecycle.reclaim_note(aimaster_budget(job))
                if decision.backoff
                else lifecycle.platform_note(aimaster_budget(job))
            )
            messages[job.pk] = say("Requeued: {message} ({reason})", message=i.message, reason=note)
            told = (
                say(
                    "{message} ({reason}); back to the spot market; lost {lost} GPU-hours",
                    message=i.message,
                    reason=note,
                    lost=lost,
                )
                if bidding
                else say(
                    "{message} ({reason}); back to the queue; lost {lost} GPU-hours",
                    message=i.message,
                    reason=note,
                    lost=lost,
                )
            )
        else:
            used, most = job.restart_times, job.max_restarts
            messages[job.pk] = say(
                "Requeued by AIMaster ({used}/{most}): {message}",
                used=used,
                most=most,
                message=i.message,
            )
            told = (
                say(
                    "AIMaster restart {used}/{most}: back to the spot market; "
                    "lost {lost} GPU-hours",
                    used=used,
                    most=most,
                    lost=lost,
                )
                if bidding
                else say(
                    "AIMaster restart {used}/{most}: back to the queue; lost {lost} GPU-hours",
                    used=used,
                    most=most,
                    lost=lost,
                )
            )
        events.append(JobEvent(job=job, kind="Requeued", at=now, message=told))
    if requeued:
        rows_update(
            Job,
            ["restart_times", "attempt", "not_before"],
            [(i.job.pk, i.job.restart_times, i.job.attempt, i.job.not_before) for i, _ in requeued],
        )
        JobRestart.objects.bulk_create(restarts)
        for status, group in back.items():
            jobs_transition_bulk(
                jobs=[i.job for i in group],
                status=status,
                now=now,
                reason_codes={i.job.pk: i.cause for i in group},
                reason_messages=messages,
            )
    for i, decision in failed:
        messages[i.job.pk] = say("{message} ({reason})", message=i.message, reason=decision.reason)
        told = ended_message(
            message=i.message, reason=decision.reason, lost_gpu_seconds=i.lost_gpu_seconds
        )
        events.append(JobEvent(job=i.job, kind="Failed", message=told, at=now))
        i.job.ended_lost_gpu_seconds = i.lost_gpu_seconds
    jobs_transition_bulk(
        jobs=[i.job for i, _ in failed],
        status=JobStatus.FAILED,
        now=now,
        reason_codes={i.job.pk: i.cause for i, _ in failed},
        reason_messages=messages,
    )
    rows_update(
        Job, ["ended_lost_gpu_seconds"], [(i.job.pk, i.lost_gpu_seconds) for i, _ in failed]
    )
    JobEvent.objects.bulk_create(events)


def _record_waiting(waiting: tuple[engine.Waiting, ...], shown: dict) -> None:
    """Store each pending job's reason, queue position and the reason's code (its
    SubStatus), writing only what changed, in one batched statement (`rows_update`). A job
    that left Queuing meanwhile is not touched."""
    rows = []
    for w in waiting:
        new = (w.reason[:256], w.position, w.queue_size, w.code)
        if shown.get(w.job_id) != new:
            rows.append((w.job_id, *new))
    rows_update(
        Job,
        ["pending_reason", "queue_position", "queue_size", "sub_status"],
        rows,
        where={"status": JobStatus.QUEUING},
    )


def _quota_name(job: Job) -> str:
    assert job.quota is not None  # the scheduler admits quota jobs only
    return job.quota.name
