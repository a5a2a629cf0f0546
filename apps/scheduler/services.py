"""The live scheduler tick: load a snapshot from the database, plan with the pure engine,
apply the plan in one transaction.

Only quota jobs pass through here; public pay-as-you-go and spot jobs are placed by the
market. Every write is a compare-and-set on the job's status, so a replayed or concurrent
tick that planned from stale state changes nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from apps.cluster.models import Node, Quota, ResourcePool
from apps.jobs.models import (
    ACTIVE_STATUSES,
    Job,
    JobRestart,
    JobRole,
    JobStatus,
    Pod,
    PodStatus,
    ResourceSource,
)
from apps.jobs.execution import pods_placed, pods_stopping
from apps.jobs.services import job_event, job_transition
from apps.scheduler import engine

LIVE_POD_STATUSES = (PodStatus.PENDING, PodStatus.RUNNING)


@dataclass(frozen=True)
class TickReport:
    admitted: int
    preempted: int
    waiting: int


def _ts(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _resources(role: JobRole) -> engine.Resources:
    return engine.Resources(cpu=role.cpu, memory=role.memory, gpu=role.gpu)


def scheduler_snapshot() -> engine.Snapshot:
    """Read the dedicated pools, the quota tree, running quota jobs and the queue."""
    dedicated = ResourcePool.Kind.DEDICATED
    nodes = tuple(
        engine.Node(
            id=n.id, pool_id=n.pool_id,
            capacity=engine.Resources(cpu=n.cpu, memory=n.memory, gpu=n.gpu),
            schedulable=n.status == Node.Status.READY,
        )
        for n in Node.objects.filter(pool__kind=dedicated).order_by("id")
    )
    quotas = tuple(
        engine.Quota(
            id=q.id, name=q.name, parent_id=q.parent_id, pool_id=q.pool_id,
            min=engine.Resources(cpu=q.min_cpu, memory=q.min_memory, gpu=q.min_gpu),
            strategy=q.queue_strategy,
        )
        for q in Quota.objects.order_by("id")
    )
    pods_by_job: dict[int, list[engine.RunningPod]] = defaultdict(list)
    pod_start: dict[int, datetime] = {}
    live_pods = Pod.objects.filter(
        status__in=LIVE_POD_STATUSES, node__isnull=False, node__pool__kind=dedicated
    ).select_related("role")
    for pod in live_pods:
        pods_by_job[pod.job_id].append(
            engine.RunningPod(pod_id=pod.id, node_id=pod.node_id, resources=_resources(pod.role),
                              in_quota=bool(pod.in_quota))
        )
        if pod.started_at and (pod.job_id not in pod_start or pod.started_at < pod_start[pod.job_id]):
            pod_start[pod.job_id] = pod.started_at
    running = [
        engine.RunningJob(
            job_id=job.id, name=job.display_name, quota_id=job.quota_id, idle_mode=job.idle_mode,
            priority=job.priority,
            # Lost work counts from this attempt's start, not the job's first start.
            started_at=(pod_start.get(job.id) or job.status_changed_at).timestamp(),
            last_checkpoint_at=_ts(job.last_checkpoint_at), pods=tuple(pods_by_job[job.id]),
        )
        for job in Job.objects.filter(id__in=list(pods_by_job)).order_by("id")
    ]
    running += _dying_pods(dedicated)
    pending_jobs = Job.objects.filter(
        status=JobStatus.QUEUING, resource_source=ResourceSource.QUOTA
    ).prefetch_related("roles").order_by("id")
    pending = tuple(
        engine.PendingJob(
            job_id=job.id, name=job.display_name, quota_id=job.quota_id, idle_mode=job.idle_mode,
            priority=job.priority, submitted_at=job.submitted_at.timestamp(),
            pods=tuple(
                engine.PodRequest(key=f"{role.role_type.lower()}-{i}", resources=_resources(role))
                for role in job.roles.all() for i in range(role.pod_count)
            ),
            not_before=_ts(job.not_before),
        )
        for job in pending_jobs
    )
    return engine.Snapshot(nodes=nodes, quotas=quotas, running=tuple(running), pending=pending)


def _dying_pods(pool_kind: str) -> list[engine.RunningJob]:
    """Pods already marked Preempted/Stopped/Failed whose processes are still winding down
    (SIGTERM, grace period) hold their room until they exit. Each job's dying pods appear as
    one `stopping` job under a negative id, so the engine neither admits onto that room nor
    picks them as victims again; an owner waiting for it says "room being freed"."""
    dying: dict[int, list[engine.RunningPod]] = defaultdict(list)
    pods = Pod.objects.filter(
        node__isnull=False, node__pool__kind=pool_kind,
        process__state__in=["queued", "starting", "running"],
    ).exclude(status__in=LIVE_POD_STATUSES).select_related("role", "job")
    jobs = {}
    for pod in pods:
        dying[pod.job_id].append(engine.RunningPod(
            pod_id=pod.id, node_id=pod.node_id, resources=_resources(pod.role),
            in_quota=bool(pod.in_quota)))
        jobs[pod.job_id] = pod.job
    return [
        engine.RunningJob(
            job_id=-job_id, name=f"{jobs[job_id].display_name} (stopping)",
            quota_id=jobs[job_id].quota_id, idle_mode=jobs[job_id].idle_mode,
            priority=jobs[job_id].priority, started_at=0.0, last_checkpoint_at=None,
            pods=tuple(pod_list), stopping=True,
        )
        for job_id, pod_list in sorted(dying.items())
    ]


def scheduler_config() -> engine.Config:
    return engine.Config(min_run_seconds=settings.SCHEDULER_MIN_RUN_SECONDS)


@transaction.atomic
def scheduler_tick(*, now: datetime) -> TickReport:
    """Plan and apply one scheduling pass. Call under the scheduler lock."""
    snapshot = scheduler_snapshot()
    plan = engine.plan(snapshot, now=now.timestamp(), config=scheduler_config())
    preempted = sum(_apply_preemption(p, now=now) for p in plan.preemptions)
    admitted = sum(_apply_admission(a, now=now) for a in plan.admissions)
    _record_waiting(plan.waiting)
    return TickReport(admitted=admitted, preempted=preempted, waiting=len(plan.waiting))


def _apply_admission(admission: engine.Admission, *, now: datetime) -> bool:
    job = Job.objects.select_for_update(of=("self",)).filter(
        pk=admission.job_id, status=JobStatus.QUEUING
    ).select_related("quota").first()
    if job is None:
        return False
    roles = {role.role_type.lower(): role for role in job.roles.all()}
    nodes = Node.objects.in_bulk({p.node_id for p in admission.placements})
    pods = []
    for placement in admission.placements:
        role_key, _, index = placement.key.rpartition("-")
        pods.append(Pod(
            job=job, role=roles[role_key], index=int(index), attempt=job.attempt,
            pod_id=f"{job.job_id}-{placement.key}-a{job.attempt}",
            node=nodes[placement.node_id], in_quota=placement.in_quota,
            status=PodStatus.PENDING,
        ))
    Pod.objects.bulk_create(pods)
    job.pending_reason, job.queue_position, job.queue_size, job.not_before = "", None, None, None
    if job.started_at is None:
        job.started_at = now
    job.save(update_fields=["pending_reason", "queue_position", "queue_size", "not_before",
                            "started_at"])
    job_event(job=job, kind="Dequeued", message=f"Dequeued from quota {job.quota.name}", now=now)
    job_transition(job=job, status=JobStatus.ENV_PREPARING, now=now, reason_code="JobDequeued",
                   reason_message=f"Dequeued from quota {job.quota.name}")
    placed = Counter((nodes[p.node_id].name, p.in_quota) for p in admission.placements)
    where = ", ".join(
        f"{name} ×{count} ({'In Quota' if in_quota else 'Not in Quota'})"
        for (name, in_quota), count in sorted(placed.items())
    )
    job_event(job=job, kind="Scheduled", message=f"Scheduled on {where}", now=now)
    if job.attempt > 0:
        latest = job.checkpoints.first()
        frm = f"checkpoint at step {latest.step}" if latest else "the start (no checkpoint yet)"
        job_event(job=job, kind="Resumed", message=f"Resumed from {frm}", now=now)
    pods_placed(job=job, now=now)
    return True


def _apply_preemption(preemption: engine.Preemption, *, now: datetime) -> bool:
    job = Job.objects.select_for_update().filter(
        pk=preemption.job_id, status__in=ACTIVE_STATUSES
    ).first()
    if job is None:
        return False
    pods = list(Pod.objects.filter(job=job, attempt=job.attempt, status__in=LIVE_POD_STATUSES))
    Pod.objects.filter(pk__in=[p.pk for p in pods]).update(
        status=PodStatus.PREEMPTED, reason="Preempted", message=preemption.reason, finished_at=now)
    pods_stopping(job=job, pods=pods, now=now, reason=preemption.reason)
    job_event(job=job, kind="Preempted", message=preemption.reason, now=now)
    job_requeue_or_fail(job=job, now=now, cause="JobPreempted", message=preemption.reason,
                        lost_gpu_seconds=preemption.lost_gpu_seconds)
    return True


def job_requeue_or_fail(
    *, job: Job, now: datetime, cause: str, message: str, lost_gpu_seconds: float,
    requeue_status: str = JobStatus.QUEUING,
) -> None:
    """AIMaster: requeue (keeping the queue position, after a backoff) while restarts remain;
    otherwise, or without fault tolerance, the job ends Failed with `cause` as ReasonCode."""
    if job.enable_aimaster and job.restart_times < job.max_restarts:
        job.restart_times += 1
        job.attempt += 1
        job.not_before = now + timedelta(seconds=settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS)
        job.save(update_fields=["restart_times", "attempt", "not_before"])
        JobRestart.objects.create(job=job, number=job.restart_times, at=now, cause=cause,
                                  message=message, lost_gpu_seconds=lost_gpu_seconds)
        job_transition(job=job, status=requeue_status, now=now, reason_code=cause,
                       reason_message=f"Requeued by AIMaster ({job.restart_times}/"
                                      f"{job.max_restarts}): {message}")
        where = "the spot market" if requeue_status == JobStatus.BIDDING else "the queue"
        job_event(job=job, kind="Requeued",
                  message=f"AIMaster restart {job.restart_times}/{job.max_restarts}: back to "
                          f"{where}; lost {lost_gpu_seconds / 3600:.2f} GPU-hours", now=now)
    else:
        why = "no automatic fault tolerance" if not job.enable_aimaster else (
            f"restarts exhausted ({job.restart_times}/{job.max_restarts})")
        job_transition(job=job, status=JobStatus.FAILED, now=now, reason_code=cause,
                       reason_message=f"{message} ({why})")
        job_event(job=job, kind="Failed", message=f"{message} ({why})", now=now)


def _record_waiting(waiting: tuple[engine.Waiting, ...]) -> None:
    """Store each pending job's reason and queue position, writing only what changed."""
    if not waiting:
        return
    by_id = {w.job_id: w for w in waiting}
    changed = []
    for job in Job.objects.filter(pk__in=list(by_id)).only(
        "id", "pending_reason", "queue_position", "queue_size"
    ):
        w = by_id[job.id]
        new = (w.reason[:256], w.position, w.queue_size)
        if (job.pending_reason, job.queue_position, job.queue_size) != new:
            job.pending_reason, job.queue_position, job.queue_size = new
            changed.append(job)
    if changed:
        Job.objects.bulk_update(changed, ["pending_reason", "queue_position", "queue_size"])
