"""Writes for pod execution: launching and terminating pods (the scheduler's hook calls these),
what agents report (running, exit, checkpoints, heartbeats), and the watchdog's sweeps.

Every report is a compare-and-set on the pod's status: a replayed report changes nothing,
and a pod already Stopped or Preempted keeps that status when its killed process exits (only
its exit code is recorded). Job-level decisions lock the job row first, then its pods, in
the same order as the scheduler and `job_stop`.
"""

from __future__ import annotations

import logging
import socket
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from apps.agent import netns
from apps.agent.metrics import Figures
from apps.agent.models import NodeAgent, PodMetricSample, PodProcess
from apps.cluster.models import Node
from apps.core.db import id_chunks
from apps.core.models import Heartbeat
from apps.core.services import heartbeat_record
from apps.core.tasks import hint_on_commit, task_soon
from apps.core.words import say, say_n
from apps.jobs.execution import (
    PodsStop,
    pods_vouched_until,
    pods_watched_recorded,
    pods_winding_down,
    silent_before,
)
from apps.jobs.models import (
    LIVE_POD_STATUSES,
    Checkpoint,
    ExecutionMode,
    Job,
    JobRestart,
    JobStatus,
    Pod,
    PodStatus,
    ResourceSource,
    gpu_indexes,
)
from apps.jobs.services import SCHEDULER_TICK_TASK, job_event, job_stop_finish, job_transition
from apps.jobs.signals import paid_pods_created
from apps.scheduler import lifecycle
from apps.scheduler.services import (
    aimaster_budget,
    ended_message,
    job_requeue_or_fail,
    pods_lost_gpu_seconds,
)

logger = logging.getLogger(__name__)

PUBLIC_QUEUE = "public"
RUNNABLE_JOB_STATUSES = (JobStatus.ENV_PREPARING, JobStatus.RUNNING, JobStatus.RESTARTING)
# A pod the kernel or the disk watchdog stopped at one of its limits (docs/execution.md).
LIMIT_REASONS = ("OOMKilled", "TooManyProcesses", "DiskQuotaExceeded")


def node_queue(node_name: str) -> str:
    return f"node.{node_name}"


def pod_queue(pod: Pod) -> str:
    """The queue of the agent that runs `pod`: its node's, or "public" for the public pool."""
    return node_queue(pod.node.name) if pod.node else PUBLIC_QUEUE


def _rank_key(pod: Pod) -> tuple[int, int]:
    return lifecycle.rank_key(pod.role.role_type, pod.index)


def _lock_job(job_pk: int) -> Job:
    return Job.objects.select_for_update().get(pk=job_pk)


def _tick_soon() -> None:
    task_soon(SCHEDULER_TICK_TASK)


# --- launch and terminate (the execution hook) ---------------------------------------------


def pods_launch(*, job: Job, now: datetime) -> list[Pod]:
    """Start the job's Pending pods of its current attempt: decide each one's rank, GPUs and
    master, and enqueue `pod_start_task` on its node's queue once the transaction commits.
    A pod already launched is left alone, so calling this twice starts nothing twice."""
    current = sorted(
        Pod.objects.filter(job=job, attempt=job.attempt)
        .exclude(status__in=[PodStatus.FAILED, PodStatus.STOPPED, PodStatus.PREEMPTED])
        .select_related("role", "node"),
        key=_rank_key,
    )
    launched = set(PodProcess.objects.filter(pod__in=current).values_list("pod_id", flat=True))
    pending = [p for p in current if p.status == PodStatus.PENDING and p.pk not in launched]
    if not pending:
        return []
    _assign_gpus(pending)
    master_addr, master_port = _master(current)
    ranks = {pod.pk: rank for rank, pod in enumerate(current)}
    PodProcess.objects.bulk_create(
        PodProcess(
            pod=pod,
            queue=pod_queue(pod),
            rank=ranks[pod.pk],
            world_size=len(current),
            master_addr=master_addr,
            master_port=master_port,
            queued_at=now,
        )
        for pod in pending
    )
    starts = [(pod.pod_id, pod_queue(pod)) for pod in pending]

    def enqueue() -> None:
        from apps.agent.tasks import pod_start_task

        for pod_id, queue in starts:
            pod_start_task.apply_async(args=(pod_id,), queue=queue)

    hint_on_commit(enqueue, what="pod_start_task")  # else the agent's reconcile starts them
    return pending


def _assign_gpus(pods: Sequence[Pod]) -> None:
    """Give each pod GPU indexes on its node that no other live pod there holds. A pod the
    scheduler placed on named GPUs (a pool where GPUs are shared) keeps them; a shared pod
    shares its one GPU with the others the scheduler put there. A pod of the public pool
    runs on an instance of its own: indexes 0…n-1."""
    by_node: dict[int, list[Pod]] = defaultdict(list)
    for pod in pods:
        wanted = 1 if pod.role.gpu_milli else pod.role.gpu
        if pod.gpu_ids or not wanted:
            continue
        if pod.node_id:
            by_node[pod.node_id].append(pod)
        else:
            pod.gpu_ids = ",".join(str(i) for i in range(wanted))
    for node_id, group in by_node.items():
        used: set[int] = set()
        holders = (
            Pod.objects.filter(node_id=node_id, status__in=LIVE_POD_STATUSES)
            .exclude(pk__in=[p.pk for p in group])
            .exclude(gpu_ids="")
        )
        for ids in holders.values_list("gpu_ids", flat=True):
            used |= set(gpu_indexes(ids))
        for pod in pods:  # named by the scheduler in this batch
            if pod.node_id == node_id and pod.gpu_ids:
                used |= set(gpu_indexes(pod.gpu_ids))
        node = group[0].node
        assert node is not None  # the pods were grouped by their node
        free = [i for i in range(node.gpu) if i not in used]
        for pod in group:
            wanted = 1 if pod.role.gpu_milli else pod.role.gpu
            if len(free) < wanted:
                logger.warning(
                    "node %s has %d free GPU indexes for pod %s, which needs %d",
                    node.name,
                    len(free),
                    pod.pod_id,
                    wanted,
                )
            taken, free = free[:wanted], free[wanted:]
            pod.gpu_ids = ",".join(map(str, taken))
    Pod.objects.bulk_update(pods, ["gpu_ids"])


def _free_port() -> int:
    """A port free on this host now. Good on one host; with agents on several hosts the
    master's host could have it taken (docs/execution.md)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _master(current: Sequence[Pod]) -> tuple[str, int]:
    """MASTER_ADDR and MASTER_PORT for the attempt: kept from pods already launched (an Async
    restart rejoins the same master); else 127.0.0.1 when one host serves every node, or the
    address of the agent serving the rank-0 pod's node."""
    known = (
        PodProcess.objects.filter(pod__in=current, master_port__gt=0)
        .values_list("master_addr", "master_port")
        .first()
    )
    if known:
        return known
    node_ids = {p.node_id for p in current if p.node_id}
    agents = {a.node_id: a for a in NodeAgent.objects.filter(node_id__in=node_ids)}
    hosts = {
        agents[n].address or agents[n].hostname if n in agents else f"node:{n}" for n in node_ids
    }
    address = "127.0.0.1"
    if len(hosts) > 1:
        master = current[0]
        agent = agents.get(master.node_id) if master.node_id is not None else None
        if agent and agent.pod_cidr:  # the job's own address on the master's host
            address = netns.job_address(agent.pod_cidr, master.job_id)
        else:
            address = agent.address if agent else (master.node.name if master.node else address)
    return address, _free_port()


def jobs_known(job_ids: set[str]) -> set[str]:
    """Which of these job ids name jobs of this installation."""
    return set(Job.objects.filter(job_id__in=list(job_ids)).values_list("job_id", flat=True))


def pod_networks() -> list[tuple[str, str]]:
    """Each host's pod subnet and address (POD_CIDR of the agents that have one)."""
    return sorted(set(NodeAgent.objects.exclude(pod_cidr="").values_list("pod_cidr", "address")))


def pods_terminate(*, job: Job, pods: Iterable[Pod], now: datetime, reason: str) -> None:
    """`pods_terminate_bulk` for one job's pods."""
    pods_terminate_bulk(stops=[PodsStop(job=job, pods=list(pods), reason=reason)], now=now)


def pods_terminate_bulk(*, stops: Sequence[PodsStop], now: datetime) -> None:
    """Make the pods' processes go away: a start still queued is cancelled; a started pod's
    agent gets `pod_stop_task` (SIGTERM, its job's grace period, SIGKILL), pod by pod in
    the order given. Pod statuses are the caller's: this only acts on processes. Two
    queries per 2,000 pods however many jobs: a reclaim stops thousands at once."""
    grace = {pod.pk: stop.job.termination_grace_seconds for stop in stops for pod in stop.pods}
    started: dict[int, tuple[str, str]] = {}
    for pks in id_chunks(list(grace)):
        PodProcess.objects.filter(pod__in=pks, state=PodProcess.State.QUEUED).update(
            state=PodProcess.State.CANCELLED
        )
        for pk, pod_id, queue in PodProcess.objects.filter(
            pod__in=pks, state__in=[PodProcess.State.STARTING, PodProcess.State.RUNNING]
        ).values_list("pod_id", "pod__pod_id", "queue"):
            started[pk] = (pod_id, queue)
    stopping = [(*started[pk], seconds) for pk, seconds in grace.items() if pk in started]
    if not stopping:
        return

    def enqueue() -> None:
        from apps.agent.tasks import pod_stop_task

        for pod_id, queue, seconds in stopping:
            pod_stop_task.apply_async(args=(pod_id, seconds), queue=queue)

    hint_on_commit(enqueue, what="pod_stop_task")  # else the agent's watch loop stops them


def _pods_end(
    *, job: Job, pods: Sequence[Pod], status: str, reason: str, message: str, now: datetime
) -> None:
    """Give the still-live `pods` a final status and make their processes go away."""
    live = [p for p in pods if p.status in LIVE_POD_STATUSES]
    Pod.objects.filter(pk__in=[p.pk for p in live], status__in=LIVE_POD_STATUSES).update(
        status=status, reason=reason, message=message[:2000], finished_at=now
    )
    pods_terminate(job=job, pods=live, now=now, reason=message)


# --- what an agent reports -----------------------------------------------------------------


@dataclass(frozen=True)
class PodLaunch:
    """What an agent needs to start a pod it claimed."""

    pod_pk: int
    pod_id: str
    job_pk: int
    job_id: str
    attempt: int
    role_type: str
    index: int
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    node_name: str
    gpu_ids: str
    memory_mib: int
    cpu_millicores: int
    command: str
    envs: dict
    data_sources: list
    grace: int


@transaction.atomic
def pod_claim(*, pod_id: str, agent: str, hostname: str, now: datetime) -> PodLaunch | None:
    """Claim a queued pod for this agent; None if it was claimed already, cancelled, or is no
    longer Pending (stopped or preempted before it started)."""
    proc = (
        PodProcess.objects.select_related("pod__job", "pod__role", "pod__node")
        .filter(pod__pod_id=pod_id)
        .first()
    )
    if proc is None or not PodProcess.objects.filter(
        pk=proc.pk, state=PodProcess.State.QUEUED
    ).update(state=PodProcess.State.STARTING, agent=agent, host=hostname):
        return None
    pod, job = proc.pod, proc.pod.job
    if pod.status != PodStatus.PENDING or job.status not in RUNNABLE_JOB_STATUSES:
        PodProcess.objects.filter(pk=proc.pk).update(state=PodProcess.State.CANCELLED)
        return None
    return _launch(proc)


def _launch(proc: PodProcess) -> PodLaunch:
    pod, job = proc.pod, proc.pod.job
    return PodLaunch(
        pod_pk=pod.pk,
        pod_id=pod.pod_id,
        job_pk=job.pk,
        job_id=job.job_id,
        attempt=pod.attempt,
        role_type=pod.role.role_type,
        index=pod.index,
        rank=proc.rank,
        world_size=proc.world_size,
        master_addr=proc.master_addr,
        master_port=proc.master_port,
        node_name=pod.node.name if pod.node else "",
        gpu_ids=pod.gpu_ids,
        memory_mib=pod.role.memory,
        cpu_millicores=pod.role.cpu,
        command=job.user_command,
        envs=dict(job.envs or {}),
        data_sources=list(job.data_sources or []),
        grace=job.termination_grace_seconds,
    )


@transaction.atomic
def pod_report_running(
    *, pod_id: str, pid: int, sandbox: str, work_dir: str, log_path: str, now: datetime
) -> bool:
    """The agent started the pod's process: Pending → Running; the job Running once every
    pod of its attempt runs. False if the pod was stopped meanwhile."""
    pod = Pod.objects.select_related("node").filter(pod_id=pod_id).first()
    if pod is None:
        return False
    job = _lock_job(pod.job_id)
    PodProcess.objects.filter(pod=pod).update(
        state=PodProcess.State.RUNNING,
        pid=pid,
        sandbox=sandbox,
        work_dir=work_dir,
        log_path=log_path,
        started_at=now,
    )
    if not Pod.objects.filter(pk=pod.pk, status=PodStatus.PENDING).update(
        status=PodStatus.RUNNING, started_at=now
    ):
        return False
    started = (
        say(
            "Started on {node} (pid {pid}, sandbox: {sandbox})",
            node=pod.node.name,
            pid=pid,
            sandbox=sandbox,
        )
        if pod.node
        else say(
            "Started on the public pool (pid {pid}, sandbox: {sandbox})", pid=pid, sandbox=sandbox
        )
    )
    job_event(job=job, pod=pod, kind="PodStarted", now=now, message=started)
    waiting = Pod.objects.filter(job=job, attempt=job.attempt, status=PodStatus.PENDING)
    if job.status == JobStatus.ENV_PREPARING and not waiting.exists():
        job_transition(
            job=job,
            status=JobStatus.RUNNING,
            now=now,
            reason_code="JobRunning",
            reason_message=say("All pods are running"),
        )
    return True


@transaction.atomic
def pod_report_exit(
    *, pod_id: str, exit_code: int | None, now: datetime, reason: str = "", message: str = ""
) -> None:
    """The pod's process ended (exit_code None: it vanished). Running → Succeeded or Failed,
    then the job's success policy, restart policy and AIMaster decide what follows."""
    found = Pod.objects.filter(pod_id=pod_id).values_list("pk", "job_id").first()
    if found is None:
        return
    job = _lock_job(found[1])
    pod = Pod.objects.select_related("role", "node").get(pk=found[0])
    PodProcess.objects.filter(pod=pod).update(
        state=PodProcess.State.EXITED, exit_code=exit_code, exited_at=now
    )
    # Stopped or Preempted first: keep that, note the exit code
    if pod.status not in LIVE_POD_STATUSES:
        if pod.exit_code is None and exit_code is not None:
            Pod.objects.filter(pk=pod.pk).update(exit_code=exit_code)
        if job.status == JobStatus.STOPPING:  # the last of them: Stopped
            job_stop_finish(job=job, now=now)
        elif job.status == JobStatus.QUEUING:  # its next attempt may be waiting for this exit
            _tick_soon()
        else:  # or an in-place restart's new pods
            _restart_launch(job=job, now=now)
        return
    ok = exit_code == 0
    pod.status = PodStatus.SUCCEEDED if ok else PodStatus.FAILED
    pod.exit_code, pod.finished_at = exit_code, now
    pod.reason = reason or ("Completed" if ok else "Error")
    pod.message = message or (
        say("Exited with code {code}", code=exit_code)
        if exit_code is not None
        else say("Exited with no exit code")
    )
    pod.save(update_fields=["status", "exit_code", "finished_at", "reason", "message"])
    # an OOM kill (or another limit) is named as such: GetPodEvents and the job page say it
    kind = "PodSucceeded" if ok else (pod.reason if pod.reason in LIMIT_REASONS else "PodFailed")
    job_event(job=job, pod=pod, kind=kind, now=now, message=pod.message)
    if job.status in RUNNABLE_JOB_STATUSES and pod.attempt == job.attempt:
        _job_after_pod_exit(job=job, pod=pod, now=now)


def _job_after_pod_exit(*, job: Job, pod: Pod, now: datetime) -> None:
    """The success policy, then AIMaster and the restart policy, decide (`lifecycle`)."""
    current = sorted(
        Pod.objects.filter(job=job, attempt=job.attempt).select_related("role", "node"),
        key=_rank_key,
    )
    if pod.status == PodStatus.SUCCEEDED:
        outcome = lifecycle.success_outcome(
            policy=job.success_policy,
            pods=[
                lifecycle.PodState(
                    role=p.role.role_type, index=p.index, status=p.status, name=p.pod_id
                )
                for p in current
            ],
        )
        if isinstance(outcome, lifecycle.Succeeded):
            _job_end(
                job=job,
                status=JobStatus.SUCCEEDED,
                now=now,
                reason_code="JobSucceeded",
                message=outcome.message,
            )
        return
    platform = pod.reason in lifecycle.PLATFORM_REASONS  # not the job's doing
    what = _exit_text(pod, detail=pod.reason in LIMIT_REASONS or platform)
    decision = lifecycle.after_pod_failure(
        budget=aimaster_budget(job),
        platform=platform,
        restart_policy=pod.role.restart_policy,
        exit_code=pod.exit_code,
        spot=job.resource_source == ResourceSource.SPOT,
        async_mode=job.execution_mode == ExecutionMode.ASYNC,
        pod_node_ready=_nodes_ready([pod], now),
        nodes_ready=_nodes_ready(current, now),
    )
    if isinstance(decision, lifecycle.Fail):
        _job_fail(
            job=job,
            current=current,
            now=now,
            reason_code="PodFailed",
            message=what,
            reason=decision.reason,
        )
    elif isinstance(decision, lifecycle.RestartInPlace) and decision.pods_only:
        _pods_restart(job=job, failed=[pod], now=now, message=what)
    elif isinstance(decision, lifecycle.RestartInPlace):
        _job_restart(job=job, current=current, now=now, cause="PodFailed", message=what)
    else:  # the platform took it, or a node of the job went away: place the whole job again
        _job_requeue(
            job=job,
            current=current,
            now=now,
            cause=pod.reason if platform else "PodFailed",
            message=what,
            platform=platform,
        )


def _exit_text(pod: Pod, *, detail: bool) -> str:
    """How a failed pod ended, for its job's reason, events and restart records: with its
    reason and message when `detail` (a limit hit, the platform took it), or its message when
    it has no exit code."""
    values = {"pod": pod.pod_id, "role": pod.role.role_type, "index": pod.index}
    if pod.exit_code is not None and detail:
        return say(
            "Pod {pod} ({role} {index}) exited with code {code}: {kind}, {message}",
            code=pod.exit_code,
            kind=pod.reason,
            message=pod.message,
            **values,
        )
    if pod.exit_code is not None:
        return say(
            "Pod {pod} ({role} {index}) exited with code {code}", code=pod.exit_code, **values
        )
    if detail:
        return say(
            "Pod {pod} ({role} {index}) exited with no code: {kind}, {message}",
            kind=pod.reason,
            message=pod.message,
            **values,
        )
    return say(
        "Pod {pod} ({role} {index}) exited with no code ({message})", message=pod.message, **values
    )


def _nodes_ready(pods: Iterable[Pod], now: datetime) -> bool:
    """Whether every node of these pods can take a pod again: Ready, and heard from within
    NODE_LOST_AFTER (a silent one is about to be marked Lost: a restart in place there
    would be lost with it, spending a restart for nothing)."""
    silent = silent_before(now)
    return all(
        p.node is None
        or (
            p.node.status == Node.Status.READY
            and (p.node.last_heartbeat is None or p.node.last_heartbeat >= silent)
        )
        for p in pods
    )


def _count_restart(*, job: Job, now: datetime, cause: str, message: str, lost: float) -> None:
    job.restart_times += 1
    job.attempt += 1
    job.save(update_fields=["restart_times", "attempt"])
    JobRestart.objects.create(
        job=job, number=job.attempt, at=now, cause=cause, message=message, lost_gpu_seconds=lost
    )
    job_transition(
        job=job,
        status=JobStatus.RESTARTING,
        now=now,
        reason_code=cause,
        reason_message=say(
            "Restarted by AIMaster ({used}/{most}): {message}",
            used=job.restart_times,
            most=job.max_restarts,
            message=message,
        ),
    )


def _replacements(*, job: Job, pods: Iterable[Pod], now: datetime) -> None:
    """New Pending pods of the job's new attempt in the places of `pods`, then launch them."""
    new = [
        Pod(
            job=job,
            role=p.role,
            index=p.index,
            attempt=job.attempt,
            pod_id=f"{job.job_id}-{p.role.role_type.lower()}-{p.index}-a{job.attempt}",
            node=p.node,
            instance_type_id=p.instance_type_id,  # a spot pod keeps the type it got
            in_quota=p.in_quota,
            status=PodStatus.PENDING,
        )
        for p in pods
    ]
    Pod.objects.bulk_create(new)
    if job.resource_source != ResourceSource.QUOTA:
        paid_pods_created.send(
            sender=Pod,
            pod_ids=list(
                Pod.objects.filter(
                    job=job, attempt=job.attempt, status=PodStatus.PENDING
                ).values_list("pk", flat=True)
            ),
            new=False,
        )
    winding = pods_winding_down().filter(job=job).count()
    job_transition(
        job=job,
        status=JobStatus.ENV_PREPARING,
        now=now,
        reason_code="JobRestarting",
        reason_message=say(
            "Starting attempt {attempt}: {reason}",
            attempt=job.attempt,
            reason=lifecycle.winding_down_reason(winding),
        )
        if winding
        else say("Starting attempt {attempt}", attempt=job.attempt),
    )
    step = lifecycle.resume_step(
        (step, removed_at is None and damaged_at is None)
        for step, removed_at, damaged_at in job.checkpoints.values_list(
            "step", "removed_at", "damaged_at"
        )
    )
    values = {"used": job.restart_times, "most": job.max_restarts, "count": len(new)}
    job_event(
        job=job,
        kind="Restarted",
        now=now,
        message=say(
            "AIMaster restart {used}/{most}: {count} pod(s) restarted in place, resuming from "
            "checkpoint at step {step}",
            step=step,
            **values,
        )
        if step is not None
        else say(
            "AIMaster restart {used}/{most}: {count} pod(s) restarted in place, resuming from "
            "the start (no checkpoint yet)",
            **values,
        ),
    )
    if not winding:
        pods_launch(job=job, now=now)


def _restart_launch(*, job: Job, now: datetime) -> bool:
    """Start an in-place restart's new pods once no pod of an earlier attempt winds down
    (`pods_winding_down`): the old rank 0 may still be saving into the checkpoint directory
    the new one reads, and the old processes still hold the GPUs the new ones get. True if
    it started any."""
    if job.status != JobStatus.ENV_PREPARING or pods_winding_down().filter(job=job).exists():
        return False
    started = pods_launch(job=job, now=now)
    if started:
        starting = say("Starting attempt {attempt}", attempt=job.attempt)
        Job.objects.filter(pk=job.pk).update(reason_message=starting)
    return bool(started)


def jobs_stopping_sweep(*, now: datetime) -> int:
    """Stopping jobs whose pods are gone without a reported exit (their node was lost, or
    a report went missing) are Stopped (`job_stop_finish`). Idempotent; how many."""
    jobs = (
        Job.objects.filter(status=JobStatus.STOPPING)
        .exclude(pk__in=pods_winding_down().values("job_id"))
        .values_list("pk", flat=True)
    )
    stopped = 0
    for pk in list(jobs):
        with transaction.atomic():
            stopped += job_stop_finish(job=_lock_job(pk), now=now)
    return stopped


def restarts_launch_sweep(*, now: datetime) -> int:
    """Start the in-place restarts whose old pods are gone without a reported exit (their
    node was lost, or a report went missing): `_restart_launch` for each job in
    EnvPreparing with a Pending pod of its attempt not yet launched. Idempotent."""
    jobs = (
        Job.objects.filter(
            status=JobStatus.ENV_PREPARING,
            pods__status=PodStatus.PENDING,
            pods__attempt=F("attempt"),
            pods__process__isnull=True,
        )
        .exclude(pk__in=pods_winding_down().values("job_id"))
        .values_list("pk", flat=True)
        .distinct()
    )
    started = 0
    for pk in list(jobs):
        with transaction.atomic():
            started += _restart_launch(job=_lock_job(pk), now=now)
    return started


def _job_restart(
    *, job: Job, current: Sequence[Pod], now: datetime, cause: str, message: str
) -> None:
    """Sync: restart the whole job in place — every pod of the attempt is replaced on the
    same node (their room is the job's already); the old pods stay as history pods."""
    lost = pods_lost_gpu_seconds(job=job, pods=current, now=now)
    _pods_end(
        job=job,
        pods=current,
        status=PodStatus.STOPPED,
        reason="JobRestarting",
        message=say("Stopped for an AIMaster restart: {message}", message=message),
        now=now,
    )
    _count_restart(job=job, now=now, cause=cause, message=message, lost=lost)
    _replacements(job=job, pods=current, now=now)


def _pods_restart(*, job: Job, failed: Sequence[Pod], now: datetime, message: str) -> None:
    """Async: replace only the failed pods. The job still gets a new attempt number (so the
    failed pods become history pods); the pods that carry on are moved into it."""
    lost = pods_lost_gpu_seconds(job=job, pods=failed, now=now)
    old_attempt = job.attempt
    _count_restart(job=job, now=now, cause="PodFailed", message=message, lost=lost)
    Pod.objects.filter(job=job, attempt=old_attempt).exclude(pk__in=[p.pk for p in failed]).filter(
        status__in=[*LIVE_POD_STATUSES, PodStatus.SUCCEEDED]
    ).update(attempt=job.attempt)
    _replacements(job=job, pods=failed, now=now)


def _job_requeue(
    *,
    job: Job,
    current: Sequence[Pod],
    now: datetime,
    cause: str,
    message: str,
    platform: bool = False,
) -> None:
    """Stop what still runs of the attempt and send the whole job back to the queue (or the
    spot market: Bidding) through AIMaster, or fail it; a platform interruption is always
    requeued, spending no restart (`apps.scheduler.services.jobs_requeue_or_fail`)."""
    lost = pods_lost_gpu_seconds(job=job, pods=current, now=now)
    _pods_end(
        job=job,
        pods=current,
        status=PodStatus.STOPPED,
        reason=cause,
        message=say("Stopped: {message}", message=message),
        now=now,
    )
    job_requeue_or_fail(
        job=job,
        now=now,
        cause=cause,
        message=message,
        lost_gpu_seconds=lost,
        kind="platform" if platform else "failure",
    )
    _tick_soon()


def _job_fail(
    *,
    job: Job,
    current: Sequence[Pod],
    now: datetime,
    reason_code: str,
    message: str,
    reason: str,
    pod_reason: str = "",
) -> None:
    """A failure of the job's own (a pod failed, or the job hung) that AIMaster does not
    restart (`reason`: it is off, its restarts are spent, or the restart policy declines):
    the job ends Failed, and the work the failure threw away is kept on it
    (`ended_lost_gpu_seconds`) and said in its Failed event (`ended_message`) — counted as
    a restart or a requeue of the same attempt would have counted it
    (`pods_lost_gpu_seconds` of `current`, since the last checkpoint), as a preemption or
    a reclaim that ends a job does. A checkpoint its pods saved on the way out, reported a
    moment later, revises it (`_ended_lost_work_revised`)."""
    lost = pods_lost_gpu_seconds(job=job, pods=current, now=now)
    job.ended_lost_gpu_seconds = lost
    job.save(update_fields=["ended_lost_gpu_seconds"])
    _job_end(
        job=job,
        status=JobStatus.FAILED,
        now=now,
        reason_code=reason_code,
        message=say("{message} ({reason})", message=message, reason=reason),
        event=ended_message(message=message, reason=reason, lost_gpu_seconds=lost),
        pod_reason=pod_reason,
    )


def _job_end(
    *,
    job: Job,
    status: str,
    now: datetime,
    reason_code: str,
    message: str,
    pod_reason: str = "",
    event: str = "",
) -> None:
    """The job Succeeded or Failed: stop whatever of it still runs, free its room. Its
    event says `message`, or `event` when given."""
    live = list(Pod.objects.filter(job=job, status__in=LIVE_POD_STATUSES))
    _pods_end(
        job=job,
        pods=live,
        status=PodStatus.STOPPED,
        reason=pod_reason or ("JobSucceeded" if status == JobStatus.SUCCEEDED else "JobFailed"),
        message=say("Stopped: the job ended ({message})", message=message),
        now=now,
    )
    job_transition(job=job, status=status, now=now, reason_code=reason_code, reason_message=message)
    job_event(job=job, kind=str(status), message=event or message, now=now)
    _tick_soon()


def pod_event(*, pod_pk: int, kind: str, message: str, now: datetime) -> None:
    """Something the agent saw while a pod ran (a bad checkpoint manifest, an insecure
    sandbox): an event on the job, naming the pod."""
    pod = Pod.objects.select_related("job").filter(pk=pod_pk).first()
    if pod is not None:
        job_event(job=pod.job, pod=pod, kind=kind, message=message[:1000], now=now)


def checkpoint_report(*, job_pk: int, step: int, path: str, size_bytes: int, at: datetime) -> bool:
    """An EasyCkpt checkpoint was saved: record it and move Job.last_checkpoint_at. A repeated
    report of the same checkpoint changes nothing."""
    if Checkpoint.objects.filter(job_id=job_pk, step=step, path=path, created_at=at).exists():
        return False
    Checkpoint.objects.create(
        job_id=job_pk, step=step, path=path, size_bytes=size_bytes, created_at=at
    )
    Job.objects.filter(pk=job_pk).filter(
        Q(last_checkpoint_at__isnull=True) | Q(last_checkpoint_at__lt=at)
    ).update(last_checkpoint_at=at)
    job = Job.objects.get(pk=job_pk)
    if job.ended_lost_gpu_seconds is not None:  # the interruption that ended it: the latest
        _ended_lost_work_revised(job=job, checkpoint_at=at, step=step)
        return True
    restart = JobRestart.objects.filter(job=job).order_by("-number").first()
    if restart is not None and restart.lost_gpu_seconds > 0:
        _lost_work_revised(restart=restart, checkpoint_at=at, now=at, step=step)
    return True


def _lost_work_revised(
    *,
    restart: JobRestart,
    checkpoint_at: datetime | None,
    now: datetime,
    step: int | None,
    resumed: bool = False,
) -> None:
    """The work interruption `restart` lost counts from the checkpoint its next attempt
    resumes from (none: from the interrupted pods' start), as `lifecycle.lost_work_revised`
    rules, and an event says when that changes the figure. Two things show it: a
    checkpoint the interrupted attempt saved after the one the interruption counted from
    (on its way out, in the grace period, as examples/train.py does, or just before and
    read from its manifest a moment after): the restart said 11 GPU-seconds, the pod saved
    the step it stopped at and the next attempt resumed from it, nothing lost; and
    (`resumed`) the next attempt's own word of what it loaded, when it passed over a
    damaged newer checkpoint: more lost, from the older one. A checkpoint saved once a pod
    of the next attempt had started is that attempt's own — in Async mode the pods that ran
    on through a restart of the failed ones are such pods, so what they save is never taken
    for the failed pods' save; what the failed pods' replacements loaded still counts."""
    job = restart.job
    if (
        not resumed
        and checkpoint_at is not None
        and Pod.objects.filter(
            job=job, attempt=restart.number, started_at__lte=checkpoint_at
        ).exists()
    ):
        return
    lost = _lost_work_recount(
        job=job,
        number=restart.number,
        interrupted_attempt=restart.number - 1,
        at=restart.at,
        was=restart.lost_gpu_seconds,
        checkpoint_at=checkpoint_at,
        now=now,
        step=step,
        resumed=resumed,
    )
    if lost is not None:
        JobRestart.objects.filter(pk=restart.pk).update(lost_gpu_seconds=lost)


def _ended_lost_work_revised(*, job: Job, checkpoint_at: datetime, step: int) -> None:
    """The interruption that ended the job (no AIMaster, or no restart left): its pods'
    save on the way out counts as a requeued one's does (`_lost_work_revised`), and the
    job's `ended_lost_gpu_seconds` is revised with an event. No attempt follows, so every
    checkpoint reported now is the interrupted pods'."""
    if job.finished_at is None or job.ended_lost_gpu_seconds is None:
        return
    lost = _lost_work_recount(
        job=job,
        number=job.attempt + 1,  # after the restarts that requeued it (1 … attempt)
        interrupted_attempt=job.attempt,
        at=job.finished_at,
        was=job.ended_lost_gpu_seconds,
        checkpoint_at=checkpoint_at,
        now=checkpoint_at,
        step=step,
        resumed=False,
    )
    if lost is not None:
        Job.objects.filter(pk=job.pk).update(ended_lost_gpu_seconds=lost)


def _lost_work_recount(
    *,
    job: Job,
    number: int,
    interrupted_attempt: int,
    at: datetime,
    was: float,
    checkpoint_at: datetime | None,
    now: datetime,
    step: int | None,
    resumed: bool,
) -> float | None:
    """Interruption `number` (at `at`, of attempt `interrupted_attempt`) counted again from
    `checkpoint_at` (None: from its pods' start): the new figure, with a LostWorkRevised
    event saying why, or None when `lifecycle.lost_work_revised` keeps `was`. The pods it
    interrupted are those of that attempt that ended with it."""
    interrupted = Pod.objects.filter(
        job=job, attempt=interrupted_attempt, finished_at=at
    ).select_related("role")
    lost = lifecycle.lost_work_revised(
        was=was,
        recounted=pods_lost_gpu_seconds(
            job=job,
            pods=interrupted,
            now=at,
            checkpoint_at=checkpoint_at,
            from_start=checkpoint_at is None,
        ),
        resumed=resumed,
    )
    if lost is None:
        return None
    values = {"number": number, "lost": f"{lost:,.0f}", "was": f"{was:,.0f}"}
    job_event(
        job=job,
        kind="LostWorkRevised",
        message=say(
            "Checkpoint at step {step} saved by the interrupted attempt: the work lost at "
            "interruption {number} is {lost} GPU-seconds, not {was}",
            step=step,
            **values,
        )
        if not resumed
        else say(
            "Attempt {number} resumed from checkpoint at step {step}: the work lost at "
            "interruption {number} is {lost} GPU-seconds, not {was}",
            step=step,
            **values,
        )
        if step is not None
        else say(
            "Attempt {number} resumed from the start: the work lost at interruption {number} "
            "is {lost} GPU-seconds, not {was}",
            **values,
        ),
        now=now,
    )
    return lost


def checkpoint_resumed(
    *, pod_pk: int, step: int | None, path: str | None, damaged: Sequence[str], at: datetime
) -> None:
    """A pod's EasyCkpt load (`load_latest`) said what it resumed from: `step` and its file
    `path` (None: from the start), passing over the newer files `damaged` (their SHA-256 or
    pickle did not check). Those are marked damaged, once, so no later restart is said to
    resume from them (`lifecycle.resume_step`). When that is news and the pod starts an
    attempt after an interruption, the "Resuming" event the restart wrote (before the pod
    ran, naming a damaged step as the one its load would try) is followed by one naming the
    step really loaded (`lifecycle.resume_message`), and the work the interruption lost is
    counted from that checkpoint (`_lost_work_revised`)."""
    pod = Pod.objects.select_related("job").filter(pk=pod_pk).first()
    if pod is None or not damaged:
        return
    job = pod.job
    newly = list(
        Checkpoint.objects.filter(job=job, path__in=damaged[:64], damaged_at__isnull=True)
        .order_by("step")
        .values_list("pk", "path")
    )
    if not newly:
        return
    Checkpoint.objects.filter(pk__in=[pk for pk, _ in newly]).update(damaged_at=at)
    names = [Path(p).name for _, p in newly]
    restart = JobRestart.objects.filter(job=job, number=pod.attempt).first()
    if restart is None or pod.attempt != job.attempt:
        return  # a first attempt, or a late word from an attempt already over
    loaded = (
        Checkpoint.objects.filter(job=job, step=step, path=path).order_by("-created_at").first()
        if step is not None and path is not None
        else None
    )
    if step is not None and loaded is None:
        return  # a checkpoint never recorded: its time, the work lost from it, unknown
    job_event(
        job=job,
        pod=pod,
        kind="Resumed",
        message=lifecycle.resume_message(step, passed_over=names),
        now=at,
    )
    _lost_work_revised(
        restart=restart,
        checkpoint_at=loaded.created_at if loaded is not None else None,
        now=at,
        step=step,
        resumed=True,
    )


def checkpoint_files(*, job_pk: int, directory: str) -> list[str]:
    """The paths of the job's checkpoints in `directory` not yet known to be removed."""
    return [
        path
        for path in Checkpoint.objects.filter(job_id=job_pk, removed_at__isnull=True)
        .order_by("created_at", "id")
        .values_list("path", flat=True)
        if str(Path(path).parent) == directory
    ]


def checkpoints_removed(*, job_pk: int, paths: Iterable[str], at: datetime) -> int:
    """The job's checkpoint files at these paths are gone: their rows say so (once)."""
    marked = 0
    for chunk in id_chunks(list(paths)):  # type: ignore[arg-type]
        marked += Checkpoint.objects.filter(
            job_id=job_pk, path__in=chunk, removed_at__isnull=True
        ).update(removed_at=at)
    return marked


@dataclass(frozen=True)
class PodWatch:
    """What a running pod's agent re-checks every second."""

    status: str
    deadline: datetime | None  # the job's max running time runs out then
    hung: str | None = None  # AIMaster's hang detection says the job is hung: why


def pods_watch(*, pod_pks: Iterable[int], now: datetime | None = None) -> dict[int, PodWatch]:
    """What the agent re-checks every second for each of its running pods, in one query
    (a pod missing from the answer was deleted), and one more over the pods of the jobs
    with hang detection, whichever agent runs them."""
    now = now or timezone.now()
    rows = list(
        Pod.objects.filter(pk__in=list(pod_pks)).values_list(
            "pk",
            "status",
            "job_id",
            "job__status",
            "job__started_at",
            "job__max_running_time_minutes",
            "job__hang_seconds",
        )
    )
    watched = {job_id: hang for *_, job_id, status, _, _, hang in rows if hang is not None}
    quiet = _jobs_quiet_since(list(watched)) if watched else {}
    return {
        pk: PodWatch(
            status=status,
            deadline=started + timedelta(minutes=minutes) if started and minutes else None,
            hung=lifecycle.hang_message(
                quiet_since=quiet.get(job_id), interval=hang, now=now.timestamp()
            )
            if hang is not None and job_status == JobStatus.RUNNING
            else None,
        )
        for pk, status, job_id, job_status, started, minutes, hang in rows
    }


def _jobs_quiet_since(job_ids: Sequence[int]) -> dict[int, float]:
    """Since when each job's live pods have been quiet: the newest output any of them wrote
    (as their agents reported it) or the newest pod start, whichever is later; jobs with no
    started pod are left out."""
    found: dict[int, float] = {}
    rows = (
        Pod.objects.filter(job_id__in=job_ids, status__in=LIVE_POD_STATUSES)
        .values("job_id")
        .annotate(output=Max("process__output_at"), start=Max("started_at"))
        .order_by()
        .values_list("job_id", "output", "start")
    )
    for job_id, output, start in rows:
        moments = [m.timestamp() for m in (output, start) if m is not None]
        if moments:
            found[job_id] = max(moments)
    return found


def pod_metrics_record(*, at: datetime, samples: Sequence[tuple[int, Figures]]) -> int:
    """Store one sampling round of an agent: a row per pod (`samples`: pod pk and its
    figures), all in one insert; pods with no figure at all are left out. How many rows."""
    rows = [
        PodMetricSample(
            pod_id=pod_pk,
            at=at,
            cpu_cores=f.cpu_cores,
            memory_bytes=f.memory_bytes,
            gpu_percent=f.gpu_percent,
            gpu_memory_bytes=f.gpu_memory_bytes,
            net_rx_rate=f.net_rx_rate,
            net_tx_rate=f.net_tx_rate,
            disk_read_rate=f.disk_read_rate,
            disk_write_rate=f.disk_write_rate,
        )
        for pod_pk, f in samples
        if not f.empty
    ]
    PodMetricSample.objects.bulk_create(rows)
    return len(rows)


def pod_metrics_sweep(*, now: datetime, retention: timedelta) -> int:
    """Remove the samples older than `retention` (each agent's housekeeping: whichever
    comes first removes them, the others find none). How many were removed."""
    removed, _ = PodMetricSample.objects.filter(at__lt=now - retention).delete()
    return removed


def pod_output_report(*, pod_pk: int, at: datetime) -> None:
    """The pod's log grew at `at` (its agent reports it every few seconds at most)."""
    PodProcess.objects.filter(pod_id=pod_pk).filter(
        Q(output_at__isnull=True) | Q(output_at__lt=at)
    ).update(output_at=at)


@transaction.atomic
def job_hang(*, job_pk: int, now: datetime) -> bool:
    """AIMaster's hang detection: a running job none of whose pods has written output for
    its hang interval is restarted as `lifecycle.after_hang` decides: every pod in place (a
    counted restart, cause JobHang, with its lost work), or placed again if a node of it is
    not Ready; failed once its restarts are spent. False when it is not hung (any more), or
    not running."""
    job = (
        Job.objects.select_for_update()
        .filter(pk=job_pk, status=JobStatus.RUNNING, hang_seconds__isnull=False)
        .first()
    )
    if job is None:
        return False
    hung = lifecycle.hang_message(
        quiet_since=_jobs_quiet_since([job.pk]).get(job.pk),
        interval=job.hang_seconds,
        now=now.timestamp(),
    )
    if hung is None:
        return False
    current = list(
        Pod.objects.filter(job=job, status__in=LIVE_POD_STATUSES).select_related("role", "node")
    )
    job_event(job=job, kind="JobHang", message=say("AIMaster: {reason}", reason=hung), now=now)
    message = say("The job hung: {reason}", reason=hung)
    decision = lifecycle.after_hang(
        budget=aimaster_budget(job),
        spot=job.resource_source == ResourceSource.SPOT,
        nodes_ready=_nodes_ready(current, now),
    )
    if isinstance(decision, lifecycle.Fail):
        _job_fail(
            job=job,
            current=current,
            now=now,
            reason_code="JobHang",
            message=message,
            reason=decision.reason,
            pod_reason="JobHang",
        )
    elif isinstance(decision, lifecycle.RestartInPlace):
        _job_restart(job=job, current=current, now=now, cause="JobHang", message=message)
    else:
        _job_requeue(job=job, current=current, now=now, cause="JobHang", message=message)
    return True


@transaction.atomic
def job_timeout(*, job_pk: int, now: datetime) -> bool:
    """Fail a job that ran past its max running time (ReasonCode JobTimeout); its pods are
    stopped. False when it has not, or is no longer running."""
    job = (
        Job.objects.select_for_update()
        .filter(
            pk=job_pk,
            status__in=RUNNABLE_JOB_STATUSES,
            max_running_time_minutes__isnull=False,
            started_at__isnull=False,
        )
        .first()
    )
    if job is None:
        return False
    limit, started = job.max_running_time_minutes, job.started_at
    assert limit is not None and started is not None  # filtered above
    if started + timedelta(minutes=limit) > now:
        return False
    _job_end(
        job=job,
        status=JobStatus.FAILED,
        now=now,
        reason_code="JobTimeout",
        message=say("Exceeded the max running time of {limit} min", limit=limit),
        pod_reason="JobTimeout",
    )
    return True


def jobs_timeout_sweep(*, now: datetime) -> int:
    """Fail every running job past its max running time. Idempotent."""
    candidates = Job.objects.filter(
        status__in=RUNNABLE_JOB_STATUSES,
        max_running_time_minutes__isnull=False,
        started_at__isnull=False,
    ).values_list("pk", "started_at", "max_running_time_minutes")
    due = [
        pk
        for pk, started, limit in candidates
        if started is not None and limit is not None and started + timedelta(minutes=limit) <= now
    ]
    return sum(job_timeout(job_pk=pk, now=now) for pk in due)


# --- agents and nodes ----------------------------------------------------------------------


def agent_heartbeat(
    *,
    worker: str,
    hostname: str,
    address: str,
    nodes: Sequence[str],
    public: bool,
    sandbox: str,
    now: datetime,
    pod_cidr: str = "",
    reports_rounds: bool = False,
    pods_watched_at: datetime | None = None,
) -> int:
    """An agent answered: its nodes are alive (a Lost one is Ready again). An agent that
    reports its watch rounds (`reports_rounds`) says when its last complete one began
    (`pods_watched_at`, None before its first), recorded on its nodes and its own row by
    `pods_watched_recorded`; one from before says nothing, and its heartbeat alone bounds
    its pods' bills. Returns how many nodes it serves."""
    served = list(Node.objects.filter(name__in=list(nodes)))
    # one update per watch-round time recorded: all its nodes alike but after a restart
    recorded: dict[datetime | None, list[int]] = defaultdict(list)
    for node in served:
        watched = pods_watched_recorded(
            reported=pods_watched_at,
            reports_rounds=reports_rounds,
            heartbeat=node.last_heartbeat,
            watched=node.pods_watched_at,
        )
        recorded[watched].append(node.pk)
    for watched, pks in recorded.items():
        Node.objects.filter(pk__in=pks).update(
            last_heartbeat=now, lost_at=None, pods_watched_at=watched
        )
    for node in served:
        if node.status == Node.Status.LOST:
            Node.objects.filter(pk=node.pk, status=Node.Status.LOST).update(
                status=Node.Status.READY
            )
            logger.warning("node %s reports again (agent %s): Ready", node.name, worker)
        NodeAgent.objects.update_or_create(
            node=node,
            defaults={
                "worker": worker,
                "hostname": hostname,
                "address": address,
                "sandbox": sandbox,
                "pod_cidr": pod_cidr,
                "last_seen": now,
            },
        )
    if public:
        what = say_n(
            len(served),
            "{host} ({address}): {count} node and the public pool; sandbox {code}",
            "{host} ({address}): {count} nodes and the public pool; sandbox {code}",
            host=hostname,
            address=address,
            code=sandbox,
        )
    else:
        what = say_n(
            len(served),
            "{host} ({address}): {count} node; sandbox {code}",
            "{host} ({address}): {count} nodes; sandbox {code}",
            host=hostname,
            address=address,
            code=sandbox,
        )
    before = Heartbeat.objects.filter(name=_agent_beat(worker)).first()
    heartbeat_record(
        name=_agent_beat(worker),
        now=now,
        detail=what[:200],
        pods_watched_at=pods_watched_recorded(
            reported=pods_watched_at,
            reports_rounds=reports_rounds,
            heartbeat=before.last_seen if before else None,
            watched=before.pods_watched_at if before else None,
        ),
    )
    return len(served)


WATCHDOG = "nodes-watchdog"


def nodes_mark_lost(*, now: datetime) -> list[str]:
    """Mark nodes silent for NODE_LOST_AFTER seconds Lost and fail their live pods (NodeLost);
    their jobs are requeued, a platform interruption. A Cordoned or Draining node (an
    admin's state) stays so, so its agent's return does not make it Ready behind the
    admin's back; its pods are lost all the same. The first sweep after the watchdog
    itself was silent that long (beat was down, so nobody asked agents for heartbeats) only
    starts watching again."""
    previous = Heartbeat.objects.filter(name=WATCHDOG).values_list("last_seen", flat=True).first()
    heartbeat_record(name=WATCHDOG, now=now)
    window = timedelta(seconds=settings.NODE_LOST_AFTER)
    if previous is None or now - previous > window:
        return []
    cutoff = silent_before(now)
    # Every silent node is marked before any pod fails: each requeue asks for a tick, which
    # must not place the job on a node of the same outage (the scheduler also skips nodes
    # silent since before `cutoff`), to be lost and requeued a second time.
    lost = []
    # A Lost node with live pods is one whose sweep was killed between marking it and
    # failing its pods: this sweep finishes it (no pod is placed on a Lost node).
    unfinished = Pod.objects.filter(
        status__in=LIVE_POD_STATUSES, node__status=Node.Status.LOST
    ).values("node_id")
    for node in (
        Node.objects.filter(last_heartbeat__lt=cutoff)
        .filter(~Q(status=Node.Status.LOST) | Q(pk__in=unfinished))
        .order_by("id")
    ):
        if node.status != Node.Status.READY:  # Lost, or an admin's Cordoned or Draining:
            # it stays so; its processes are gone all the same (those winding down hold
            # their jobs back no longer), and its pods are lost
            Node.objects.filter(pk=node.pk, lost_at__isnull=True).update(lost_at=now)
            if _jobs_on(node):
                lost.append(node)
        elif Node.objects.filter(
            pk=node.pk, last_heartbeat__lt=cutoff, status=Node.Status.READY
        ).update(status=Node.Status.LOST, lost_at=now):
            lost.append(node)
    for node in lost:
        node_fail_pods(node=node, now=now)
    public_pods_lost(cutoff=cutoff, now=now)
    return [node.name for node in lost]


def public_pods_lost(*, cutoff: datetime, now: datetime) -> list[str]:
    """Pods of the public pool have no node to go Lost: they are lost with their agent.
    Each agent running such pods that has not reported since `cutoff` loses them (NodeLost,
    as of its last heartbeat, no later than its last complete watch round:
    `pods_vouched_until`), and their jobs are requeued as a platform interruption.
    Returns the silent agents' names."""
    agents = set(
        PodProcess.objects.filter(
            pod__node__isnull=True,
            pod__status__in=LIVE_POD_STATUSES,
            state__in=[PodProcess.State.STARTING, PodProcess.State.RUNNING],
        ).values_list("agent", flat=True)
    )
    beats = {
        name: (seen, watched)
        for name, seen, watched in Heartbeat.objects.filter(
            name__in=[_agent_beat(a) for a in agents]
        ).values_list("name", "last_seen", "pods_watched_at")
    }
    silent = sorted(
        a for a in agents if _agent_beat(a) in beats and beats[_agent_beat(a)][0] < cutoff
    )
    for agent in silent:
        message = say(
            "The agent {agent}, which ran this pod of the public pool, stopped reporting: "
            "no heartbeat for {seconds}s",
            agent=agent,
            seconds=f"{settings.NODE_LOST_AFTER:g}",
        )
        pods = Pod.objects.filter(
            node__isnull=True, status__in=LIVE_POD_STATUSES, process__agent=agent
        )
        for job_pk in sorted(set(pods.values_list("job_id", flat=True))):
            with transaction.atomic():
                job = _lock_job(job_pk)
                _pods_lost(
                    job=job,
                    pods=list(pods.filter(job=job)),
                    seen=pods_vouched_until(
                        heartbeat=beats[_agent_beat(agent)][0],
                        watched=beats[_agent_beat(agent)][1],
                    ),
                    message=message,
                    now=now,
                )
    if silent:
        _tick_soon()
    return silent


def pods_reported_until(*, pod_ids: Sequence[int]) -> dict[int, datetime]:
    """`apps.jobs.execution.pods_reported_until`: the time the watchdog would end each pod
    at if its node (or, for the public pool, its agent) were lost now (see
    `node_fail_pods`, `public_pods_lost`): `pods_vouched_until` of its node's last
    heartbeat and watch round, or its agent's. Two queries."""
    found: dict[int, datetime] = {}
    agents: dict[int, str] = {}
    for pk, node_seen, node_watched, agent in Pod.objects.filter(pk__in=list(pod_ids)).values_list(
        "pk", "node__last_heartbeat", "node__pods_watched_at", "process__agent"
    ):
        vouched = pods_vouched_until(heartbeat=node_seen, watched=node_watched)
        if vouched is not None:
            found[pk] = vouched
        elif agent:
            agents[pk] = _agent_beat(agent)
    beats = {
        name: vouched
        for name, seen, watched in Heartbeat.objects.filter(
            name__in=set(agents.values())
        ).values_list("name", "last_seen", "pods_watched_at")
        if (vouched := pods_vouched_until(heartbeat=seen, watched=watched)) is not None
    }
    found.update({pk: beats[name] for pk, name in agents.items() if name in beats})
    return found


def _agent_beat(worker: str) -> str:
    """The Heartbeat row an agent's answers keep fresh (see agent_heartbeat)."""
    return f"agent:{worker}"[:100]


def node_fail_pods(*, node: Node, now: datetime) -> int:
    """The node is gone: its live pods fail (NodeLost) as of its last heartbeat (no later
    than its agent's last complete watch round: `pods_vouched_until`), the rest of
    each job is stopped and the job requeued — a platform interruption, so no job fails and
    no AIMaster restart is spent. Returns how many jobs were affected."""
    message = say(
        "Node {node} stopped reporting: no heartbeat for {seconds}s",
        node=node.name,
        seconds=f"{settings.NODE_LOST_AFTER:g}",
    )
    job_pks = _jobs_on(node)
    for job_pk in job_pks:
        with transaction.atomic():
            job = _lock_job(job_pk)
            _pods_lost(
                job=job,
                pods=list(Pod.objects.filter(job=job, node=node, status__in=LIVE_POD_STATUSES)),
                seen=pods_vouched_until(
                    heartbeat=node.last_heartbeat, watched=node.pods_watched_at
                ),
                message=message,
                now=now,
            )
    return len(job_pks)


def _jobs_on(node: Node) -> list[int]:
    """The jobs with live pods on the node, in lock order."""
    return sorted(
        set(
            Pod.objects.filter(node=node, status__in=LIVE_POD_STATUSES).values_list(
                "job_id", flat=True
            )
        )
    )


def _current_pods(job: Job) -> list[Pod]:
    return list(Pod.objects.filter(job=job, attempt=job.attempt).select_related("role", "node"))


def _pods_lost(
    *, job: Job, pods: Sequence[Pod], seen: datetime | None, message: str, now: datetime
) -> None:
    """Fail the job's live `pods`, lost with their node or agent, as of `seen` (as far as
    it vouched for them, `pods_vouched_until`: its last heartbeat, no later than its last
    complete watch round: the last time anything knew their processes were alive, and
    where billing stopped), so their bills (cut
    at Pod.finished_at) and lost work stop there; never before a pod started, nor before
    one that never started was created. A process that still runs is told to stop, and the
    job (locked by the caller) is requeued."""
    seen = min(seen or now, now)
    for pod in pods:
        Pod.objects.filter(pk=pod.pk, status__in=LIVE_POD_STATUSES).update(
            status=PodStatus.FAILED,
            reason="NodeLost",
            message=message[:2000],
            finished_at=max(seen, pod.started_at or pod.created_at),
        )
    pods_terminate(job=job, pods=pods, now=now, reason=message)
    job_event(job=job, kind="NodeLost", message=message, now=now)
    if job.status in RUNNABLE_JOB_STATUSES:  # a platform interruption: requeued, not counted
        _job_requeue(
            job=job,
            current=_current_pods(job),
            now=now,
            cause="NodeLost",
            message=message,
            platform=True,
        )


def node_drain(*, node: Node, now: datetime) -> int:
    """Drain one node (`nodes_drain`); returns how many jobs were moved off it."""
    return nodes_drain(nodes=[node], now=now)


def nodes_drain(*, nodes: Iterable[Node], now: datetime) -> int:
    """An admin takes the nodes out of service. The intent is recorded first: each becomes
    Draining (no new pods; a Lost node stays Lost, and the watchdog finishes it), all of
    them before any job moves, so a job on two of them is not placed back onto the second.
    Then every job with live pods on them is moved — its pods are stopped (NodeDrained:
    SIGTERM, the job's grace period, SIGKILL, so code that checkpoints on SIGTERM saves
    first) and the job is requeued, a platform interruption — and a node left with no such
    job is Cordoned. A drain killed part-way leaves its nodes Draining, and the watchdog's
    sweep (`nodes_drain_sweep`) finishes it. Returns how many jobs were moved."""
    ids = [node.pk for node in nodes]
    Node.objects.filter(pk__in=ids, status__in=[Node.Status.READY, Node.Status.CORDONED]).update(
        status=Node.Status.DRAINING
    )
    moved = 0
    for node in Node.objects.filter(pk__in=ids).order_by("id"):
        moved += sum(_job_move_off(job_pk=job_pk, node=node, now=now) for job_pk in _jobs_on(node))
        # A pod placed as the drain began (the tick saw the node Ready) keeps it Draining,
        # for the next sweep to move.
        if not Pod.objects.filter(
            node=node, status__in=LIVE_POD_STATUSES, job__status__in=RUNNABLE_JOB_STATUSES
        ).exists():
            Node.objects.filter(pk=node.pk, status=Node.Status.DRAINING).update(
                status=Node.Status.CORDONED
            )
    return moved


def nodes_drain_sweep(*, now: datetime) -> int:
    """Finish the drains that were interrupted (the admin's request or the worker killed
    part-way through); returns how many jobs were moved."""
    return nodes_drain(nodes=Node.objects.filter(status=Node.Status.DRAINING), now=now)


def _job_move_off(*, job_pk: int, node: Node, now: datetime) -> bool:
    """Requeue the job if it still runs pods on the node (a drain running twice at once
    moves it once, and never moves it again from where it was placed since)."""
    with transaction.atomic():
        job = _lock_job(job_pk)
        if job.status not in RUNNABLE_JOB_STATUSES:
            return False  # stopping already, or ended meanwhile
        if not Pod.objects.filter(job=job, node=node, status__in=LIVE_POD_STATUSES).exists():
            return False  # moved already
        message = say(
            "Moved off {node}: the node is being drained by an admin; its pods get "
            "SIGTERM and {seconds}s to save a checkpoint before SIGKILL",
            node=node.name,
            seconds=job.termination_grace_seconds,
        )
        _job_requeue(
            job=job,
            current=_current_pods(job),
            now=now,
            cause="NodeDrained",
            message=message,
            platform=True,
        )
    return True


# --- what an agent reconciles -------------------------------------------------------------


@dataclass(frozen=True)
class AgentWork:
    """What the database says an agent should run: starts queued on its queues (their
    broker message may be lost: it is only a hint) and the pods it claimed."""

    queued: tuple[str, ...]  # pod ids whose start waits on one of the agent's queues
    claimed: dict[str, str]  # pod id → PodProcess state, for every live claim of the agent


def agent_work(
    *, agent: str, queues: Sequence[str], queued_before: datetime, limit: int = 200
) -> AgentWork:
    """Two indexed queries, whatever the number of pods."""
    queued = tuple(
        PodProcess.objects.filter(
            state=PodProcess.State.QUEUED,
            queue__in=list(queues),
            queued_at__lt=queued_before,
        )
        .order_by("queued_at", "pk")
        .values_list("pod__pod_id", flat=True)[:limit]
    )
    claimed = dict(
        PodProcess.objects.filter(
            agent=agent,
            state__in=[PodProcess.State.STARTING, PodProcess.State.RUNNING],
        ).values_list("pod__pod_id", "state")
    )
    return AgentWork(queued=queued, claimed=claimed)


def pod_launch(*, pod_id: str) -> PodLaunch | None:
    """How a pod was launched, for an agent re-adopting it after a restart; None when the
    pod no longer exists (its job was deleted)."""
    proc = (
        PodProcess.objects.select_related("pod__job", "pod__role", "pod__node")
        .filter(pod__pod_id=pod_id)
        .first()
    )
    return _launch(proc) if proc is not None else None


def pod_unclaim(*, pod_id: str, agent: str) -> bool:
    """The agent claimed the pod but died before its process started: queue it again (the
    next reconcile starts it, or cancels it if it was stopped meanwhile)."""
    return bool(
        PodProcess.objects.filter(
            pod__pod_id=pod_id,
            agent=agent,
            state=PodProcess.State.STARTING,
        ).update(state=PodProcess.State.QUEUED, agent="", host="")
    )
