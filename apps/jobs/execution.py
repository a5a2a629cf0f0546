"""Where placed pods go to run, and how they are told to stop.

The scheduler and the market place pods and call `pods_placed`; `job_stop` and reclaims call
`pods_stopping`. Which executor acts is EXECUTION_BACKEND:
- "agent": node agents (Celery workers on each node's queue) start real processes
  (apps.agent; docs/execution.md);
- "none": no processes; placed pods count as running at once. The scheduler's and the
  market's own tests use it to examine placement without waiting for processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.conf import settings

from apps.jobs.models import Job, JobStatus, Pod, PodStatus


def pods_placed(*, jobs: Sequence[Job], now: datetime) -> None:
    """The current pods of these jobs (each in EnvPreparing, locked) have nodes or public
    instances: start them."""
    if settings.EXECUTION_BACKEND == "agent":
        from apps.agent.services import pods_launch

        for job in jobs:
            pods_launch(job=job, now=now)
        return
    from apps.jobs.services import jobs_transition_bulk

    # Only the current attempt has Pending pods: earlier ones ended before it was placed.
    Pod.objects.filter(job__in=list(jobs), status=PodStatus.PENDING).update(
        status=PodStatus.RUNNING, started_at=now
    )
    jobs_transition_bulk(
        jobs=list(jobs),
        status=JobStatus.RUNNING,
        now=now,
        reason_code="JobRunning",
        reason_message="All pods are running",
    )


def pods_stopping(*, job: Job, pods: Sequence[Pod], now: datetime, reason: str) -> None:
    """Pods were marked stopped or preempted: make their processes go away."""
    if settings.EXECUTION_BACKEND == "agent":
        from apps.agent.services import pods_terminate

        pods_terminate(job=job, pods=pods, now=now, reason=reason)
