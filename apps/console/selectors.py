"""Reads for the job pages: a job's live part, re-read on every poll, and what the job
list's rows show (their clocks, how their pods ended, the fingerprint its poll compares)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from django.conf import settings
from django.utils.translation import gettext_lazy as _

from apps.agent.metrics import METRIC_TYPES, metric_text
from apps.agent.selectors import job_metrics_all
from apps.billing.selectors import JobUsage, job_usage
from apps.core.charts import Chart, metric_chart
from apps.jobs.models import (
    Checkpoint,
    Job,
    JobEvent,
    JobRestart,
    JobStatus,
    Pod,
    PodStatus,
    StatusTransition,
)
from apps.jobs.selectors import job_restarts
from apps.scheduler import lifecycle
from apps.scheduler.lifecycle import PLATFORM_REASONS


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
    removed_checkpoints: int = 0  # saved, and their files since removed (not listed)
    ended_lost_gpu_seconds: float | None = None  # lost by the interruption that ended the job

    @property
    def lost_gpu_seconds(self) -> float:
        """Work lost across every interruption (GPU-seconds since the last checkpoint): those
        that requeued the job and the one that ended it, if one did."""
        return sum(r.lost_gpu_seconds for r in self.restarts) + (self.ended_lost_gpu_seconds or 0)

    @property
    def interruptions(self) -> int:
        return len(self.restarts) + (self.ended_lost_gpu_seconds is not None)

    @property
    def latest_checkpoint(self) -> Checkpoint | None:
        return self.checkpoints[0] if self.checkpoints else None

    @property
    def resume_step(self) -> int | None:
        """The step the job's next attempt resumes from (`lifecycle.resume_step`): the
        highest of those whose files are left and not found damaged, not the one saved
        last (a clock ahead stamps an older step later)."""
        return lifecycle.resume_step((c.step, c.damaged_at is None) for c in self.checkpoints)

    @property
    def recent_checkpoints(self) -> list[Checkpoint]:
        """The few a job resumes from, shown open; the rest fold away."""
        return self.checkpoints[:CHECKPOINTS_OPEN]

    @property
    def older_checkpoints(self) -> list[Checkpoint]:
        return self.checkpoints[CHECKPOINTS_OPEN:CHECKPOINTS_SHOWN]

    @property
    def more_checkpoints(self) -> bool:
        """More than CHECKPOINTS_SHOWN were saved (only the latest are listed)."""
        return len(self.checkpoints) > CHECKPOINTS_SHOWN

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
CHECKPOINTS_OPEN = 3


def _restarts(job: Job) -> list[JobRestart]:
    """The job's interruptions (`job_restarts`), each also saying whether the platform
    caused it (`platform`): an uncounted one is either that or a preemption or reclaim."""
    restarts = job_restarts(job=job)
    for restart in restarts:
        restart.platform = restart.cause in PLATFORM_REASONS
    return restarts


def job_live(*, job: Job) -> JobLive:
    """Pods (current and history, with role and node), status history, the latest events,
    checkpoints and restarts, and the job's usage or cost."""
    pods = list(
        Pod.objects.filter(job=job)
        .select_related("role", "node", "instance_type")
        .order_by("-attempt", "role_id", "index")
    )
    events = list(job.events.select_related("pod").order_by("-at", "-id")[:EVENTS_SHOWN])
    return JobLive(
        current_pods=[p for p in pods if p.attempt >= job.attempt],
        history_pods=[p for p in pods if p.attempt < job.attempt],
        status_history=list(job.status_history.all()),
        events=events,
        checkpoints=list(job.checkpoints.filter(removed_at__isnull=True)[: CHECKPOINTS_SHOWN + 1]),
        removed_checkpoints=job.checkpoints.filter(removed_at__isnull=False).count(),
        restarts=_restarts(job),
        usage=job_usage(job=job),
        resumed=next((e for e in events if e.kind in RESUME_EVENT_KINDS), None),
        ended_lost_gpu_seconds=job.ended_lost_gpu_seconds,
    )


# --- the job list ------------------------------------------------------------------------

POD_ENDINGS = (PodStatus.SUCCEEDED, PodStatus.FAILED, PodStatus.STOPPED, PodStatus.PREEMPTED)


def job_list_version(*, jobs: list[Job], query: str, count: int, manageable: set[int]) -> str:
    """A fingerprint of what the job list's rows show: the query (filters, order, page), how
    many jobs match, and each shown job's status with its reason and queue place, attempt
    and pod counts, and whether the user may stop it. The list's poll sends it back and is
    answered 204 while it holds. The clocks (waiting, running) are left out: the page
    advances them itself between polls, and a change of status restarts them."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"{query}\n{count}\n".encode())
    for job in jobs:
        row = (
            job.job_id,
            job.status,
            job.status_changed_at.isoformat() if job.status_changed_at else "",
            job.sub_status,
            job.pending_reason,
            job.queue_position,
            job.queue_size,
            job.attempt,
            job.restart_times,
            job.pods_live,
            job.pods_in_quota,
            job.pods_not_in_quota,
            *(job_ended_pods(job)),
            job.pk in manageable,
        )
        digest.update(repr(row).encode())
    return digest.hexdigest()


def job_ended_pods(job: Job) -> list[tuple[str, int]]:
    """How the current attempt's pods that are no longer live ended: [("Succeeded", 2)…]."""
    counts = {
        PodStatus.SUCCEEDED: job.pods_succeeded,
        PodStatus.FAILED: job.pods_failed,
        PodStatus.STOPPED: job.pods_stopped,
        PodStatus.PREEMPTED: job.pods_preempted,
    }
    return [(str(status), counts[status]) for status in POD_ENDINGS if counts[status]]


def job_list_clocks(*, jobs: list[Job], now: datetime) -> None:
    """Put the list's two clocks on each job: `waiting_seconds` from submission to its first
    start (to now, or to its end, if it never started) and `running_seconds`, its time in
    Running (`job_list_rows`' `running_time`); `waiting_live` and `running_live` say which
    clock still runs, for the page to advance between polls."""
    for job in jobs:
        start = job.started_at
        end = start or job.finished_at or now
        job.waiting_seconds = max((end - job.submitted_at).total_seconds(), 0.0)
        job.waiting_live = start is None and not job.is_finished
        running = job.running_time
        job.running_seconds = running.total_seconds() if running is not None else None
        job.running_live = job.status == JobStatus.RUNNING and running is not None
        job.ended_pods = job_ended_pods(job)


# --- the job page's metric charts (GetJobMetrics' samples) --------------------------------

METRIC_LABELS = {
    "CpuCoreUsage": _("CPU (cores)"),
    "MemoryUsage": _("Memory"),
    "GpuCoreUsage": _("GPU utilisation"),
    "GpuMemoryUsage": _("GPU memory"),
    "NetworkInputRate": _("Network in"),
    "NetworkOutputRate": _("Network out"),
    "DiskReadRate": _("Disk read"),
    "DiskWriteRate": _("Disk write"),
}
METRICS_WINDOW = timedelta(hours=1)  # as GetJobMetrics' default
METRICS_POINTS = 240  # at most, per pod and chart


@dataclass(frozen=True)
class MetricPanel:
    name: str  # the MetricType
    label: str
    chart: Chart
    latest: list[tuple[str, str, str]]  # (pod id, its latest figure as text, its colour)


@dataclass(frozen=True)
class JobMetrics:
    since: datetime
    until: datetime
    step: float  # seconds per point
    panels: list[MetricPanel]
    absent: list[str]  # the labels of the metrics no pod has a figure of

    @property
    def empty(self) -> bool:
        return not self.panels


def job_metrics_panels(*, job: Job, now: datetime, zone: tzinfo) -> JobMetrics:
    """The last hour of the job's run (up to now, or to its end), each metric a chart with a
    line per pod, averaged to at most METRICS_POINTS points (GetJobMetrics' rule)."""
    until = job.finished_at or now
    since = max(until - METRICS_WINDOW, job.started_at or job.submitted_at)
    step = max(settings.POD_METRICS_SECONDS, (until - since).total_seconds() / METRICS_POINTS)
    found = job_metrics_all(job=job, start=since, end=until, step=step)
    panels, absent = [], []
    for metric in METRIC_TYPES:
        label = str(METRIC_LABELS[metric.name])
        series = found.get(metric.name)
        if not series:
            absent.append(label)
            continue
        chart = metric_chart(
            [(s.pod_id, s.points) for s in series],
            since=since,
            until=until,
            gap=max(2.5 * step, 3 * settings.POD_METRICS_SECONDS),
            zone=zone,
            y_text=lambda v, unit=metric.unit: metric_text(unit, v),
            binary=metric.unit in ("bytes", "bytes/s"),
        )
        latest = [
            (s.pod_id, metric_text(metric.unit, s.points[-1][1]), line.colour)
            for s, line in zip(series, chart.lines, strict=True)
        ]
        panels.append(MetricPanel(metric.name, label, chart, latest))
    return JobMetrics(since=since, until=until, step=step, panels=panels, absent=absent)
