"""Reads for the job pages: a job's live part, re-read on every poll."""

from __future__ import annotations

from dataclasses import dataclass

from apps.billing.selectors import JobUsage, job_usage
from apps.jobs.models import Checkpoint, Job, JobEvent, JobRestart, Pod, StatusTransition
from apps.jobs.selectors import job_restarts


@dataclass(frozen=True)
class JobLive:
    """What the live part of the job page shows; re-read every poll, in a fixed number of
    queries however many pods, restarts or events the job has."""

    current_pods: list[Pod]
    history_pods: list[Pod]
    status_history: list[StatusTransition]
    events: list[JobEvent]
    checkpoints: list[Checkpoint]
    restarts: list[JobRestart]
    usage: JobUsage
    resumed: JobEvent | None = None  # the latest "resumed from …" event of a restarted job

    @property
    def lost_gpu_seconds(self) -> float:
        """Work lost across every interruption (GPU-seconds since the last checkpoint)."""
        return sum(r.lost_gpu_seconds for r in self.restarts)

    @property
    def latest_checkpoint(self) -> Checkpoint | None:
        return self.checkpoints[0] if self.checkpoints else None

    @property
    def history_attempts(self) -> list[Attempt]:
        """History pods by attempt, newest first, each with the restart that ended it."""
        ended_by = {r.number - 1: r for r in self.restarts}  # restart n starts attempt n
        attempts: dict[int, list[Pod]] = {}
        for pod in self.history_pods:
            attempts.setdefault(pod.attempt, []).append(pod)
        return [Attempt.of(n, pods, ended_by.get(n)) for n, pods in attempts.items()]


@dataclass(frozen=True)
class Attempt:
    """One earlier attempt of a job: its pods, the restart (if any) that replaced them, and
    the reason and message all its pods ended with (a preemption, a reclaim), so the page
    says it once; both empty when the pods ended differently."""

    number: int
    pods: list[Pod]
    restart: JobRestart | None
    shared_reason: str = ""
    shared_message: str = ""

    @classmethod
    def of(cls, number: int, pods: list[Pod], restart: JobRestart | None) -> Attempt:
        ends = {(p.reason, p.message) for p in pods}
        reason, message = ends.pop() if len(ends) == 1 else ("", "")
        return cls(number, pods, restart, reason, message)


RESUME_EVENT_KINDS = ("Resumed", "Restarted")
EVENTS_SHOWN = 200
CHECKPOINTS_SHOWN = 50


def job_live(*, job: Job) -> JobLive:
    """Pods (current and history, with role and node), status history, the latest events,
    checkpoints and restarts, and the job's usage or cost."""
    pods = list(
        Pod.objects.filter(job=job)
        .select_related("role", "node")
        .order_by("-attempt", "role_id", "index")
    )
    events = list(job.events.select_related("pod").order_by("-at", "-id")[:EVENTS_SHOWN])
    return JobLive(
        current_pods=[p for p in pods if p.attempt >= job.attempt],
        history_pods=[p for p in pods if p.attempt < job.attempt],
        status_history=list(job.status_history.all()),
        events=events,
        checkpoints=list(job.checkpoints.all()[:CHECKPOINTS_SHOWN]),
        restarts=list(job_restarts(job=job)),
        usage=job_usage(job=job),
        resumed=next((e for e in events if e.kind in RESUME_EVENT_KINDS), None),
    )
