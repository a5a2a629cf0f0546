"""Where placed pods go to run, and how they are told to stop.

The scheduler and the market place pods and call `pods_placed`; `job_stop` and reclaims call
`pods_stopping` (`pods_stopping_bulk` for many jobs at once). Which executor acts is
EXECUTION_BACKEND:
- "agent": node agents (Celery workers on each node's queue) start real processes
  (apps.agent; docs/execution.md);
- "none": no processes; placed pods count as running at once. The scheduler's and the
  market's own tests use it to examine placement without waiting for processes.

The agent app registers itself as the executor when Django starts (`AgentConfig.ready`), so
the jobs app, below it, never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings
from django.db.models import Count, QuerySet

from apps.cluster.models import Node
from apps.core.words import say
from apps.jobs.models import LIVE_POD_STATUSES, Job, JobStatus, Pod, PodStatus

# The states of a pod's process (apps.agent.models.PodProcess) in which it runs or may
# still start.
LIVE_PROCESS_STATES = ("queued", "starting", "running")


@dataclass(frozen=True)
class PodsStop:
    """One job's pods that were just marked stopped or preempted, and why."""

    job: Job
    pods: Sequence[Pod]
    reason: str


class Executor(Protocol):
    """What runs pods: node agents (`apps.agent.services`)."""

    def pods_launch(self, *, job: Job, now: datetime) -> object: ...

    def pods_terminate_bulk(self, *, stops: Sequence[PodsStop], now: datetime) -> object: ...

    def pods_reported_until(self, *, pod_ids: Sequence[int]) -> dict[int, datetime]: ...


_executor: Executor | None = None


def executor_register(executor: Executor) -> None:
    global _executor
    _executor = executor


def executor() -> Executor:
    if _executor is None:
        raise RuntimeError("EXECUTION_BACKEND is agent, but the agent app is not installed")
    return _executor


def silent_before(now: datetime) -> datetime:
    """A node whose last heartbeat is older than this is silent: the watchdog marks it Lost
    (`apps.agent.services.nodes_mark_lost`), and the scheduler places nothing on it even
    before it has."""
    return now - timedelta(seconds=settings.NODE_LOST_AFTER)


def pods_placed(*, jobs: Sequence[Job], now: datetime) -> None:
    """The current pods of these jobs (each in EnvPreparing, locked) have nodes or public
    instances: start them."""
    if settings.EXECUTION_BACKEND == "agent":
        launch = executor().pods_launch
        for job in jobs:
            launch(job=job, now=now)
        return
    from apps.jobs.services import jobs_transition_bulk  # it imports this module

    # Only the current attempt has Pending pods: earlier ones ended before it was placed.
    Pod.objects.filter(job__in=list(jobs), status=PodStatus.PENDING).update(
        status=PodStatus.RUNNING, started_at=now
    )
    jobs_transition_bulk(
        jobs=list(jobs),
        status=JobStatus.RUNNING,
        now=now,
        reason_code="JobRunning",
        reason_message=say("All pods are running"),
    )


def pods_stopping(*, job: Job, pods: Sequence[Pod], now: datetime, reason: str) -> None:
    """Pods were marked stopped or preempted: make their processes go away."""
    pods_stopping_bulk(stops=[PodsStop(job=job, pods=pods, reason=reason)], now=now)


def pods_stopping_bulk(*, stops: Sequence[PodsStop], now: datetime) -> None:
    """`pods_stopping` for many jobs at once, in a fixed number of queries however many: a
    reclaim stops thousands in one tick."""
    if settings.EXECUTION_BACKEND == "agent":
        executor().pods_terminate_bulk(stops=stops, now=now)


def pods_vouched_until(*, heartbeat: datetime | None, watched: datetime | None) -> datetime | None:
    """How far an agent vouches for each pod it runs that has not been reported ended: its
    last heartbeat says the agent is alive, not that it has looked at each pod, so no
    further than the start of its last complete watch round (`watched`: every pod that had
    ended by then has had its end reported). None for `watched`: an agent that does not say
    (one from before watch rounds were reported), whose heartbeat alone bounds.

    The one rule for both: billing bills a running pod no further (`pods_reported_until`),
    and a silent agent's pods end there when it is declared lost."""
    if watched is None or heartbeat is None:
        return heartbeat if watched is None else watched
    return min(heartbeat, watched)


def pods_watched_recorded(
    *,
    reported: datetime | None,
    reports_rounds: bool,
    heartbeat: datetime | None,
    watched: datetime | None,
) -> datetime | None:
    """The watch-round time a heartbeat leaves on record, given the previous record
    (`heartbeat`, `watched`). An agent that reports its rounds (`reports_rounds`) and has
    completed one: the start of its last (`reported`). One that has not completed one yet
    (it has just started: the pods it re-adopts may have ended while it was down) vouches
    for nothing new: as far as the previous record did (`pods_vouched_until`). An agent
    that does not report rounds: None, its heartbeat alone bounds."""
    if not reports_rounds:
        return None
    if reported is not None:
        return reported
    return pods_vouched_until(heartbeat=heartbeat, watched=watched)


def pods_reported_until(*, pod_ids: Sequence[int]) -> dict[int, datetime]:
    """How far whatever runs each of these running pods vouches for it
    (`pods_vouched_until`): its node's last heartbeat and its agent's last complete watch
    round, or for a pod of the public pool its agent's. A pod runs no longer than that as
    far as anyone knows (a silent node's pods end there when it is declared Lost), so billing
    goes no further. Pods with no such report are left out; with EXECUTION_BACKEND "none"
    there are no agents, and all are."""
    if settings.EXECUTION_BACKEND != "agent" or not pod_ids:
        return {}
    return executor().pods_reported_until(pod_ids=pod_ids)


def pods_winding_down() -> QuerySet[Pod]:
    """Pods already marked ended (Preempted, Stopped, Failed) whose processes have not
    exited: SIGTERM sent and the grace period running, or an agent yet to act. They hold
    their room until they exit, and their job's next attempt waits for them: a rank 0 that
    saves on SIGTERM must not write the checkpoint directory while the next attempt reads
    it. A Lost node's processes are gone as far as anyone knows (a dead host never reports
    their exits), and so are those of a Cordoned or Draining node the watchdog found silent
    (`Node.lost_at`); if the node comes back they count again until its agent has stopped
    them. With EXECUTION_BACKEND "none" there are no processes, and none wind down."""
    return (
        Pod.objects.filter(process__state__in=LIVE_PROCESS_STATES)
        .exclude(status__in=LIVE_POD_STATUSES)
        .exclude(node__status=Node.Status.LOST)
        .exclude(node__lost_at__isnull=False)
    )


def jobs_winding_down(jobs: QuerySet[Job]) -> dict[int, int]:
    """How many pods of each of these jobs are still winding down (`pods_winding_down`);
    jobs with none are left out. One query, `jobs` as its subquery."""
    return dict(
        pods_winding_down()
        .filter(job__in=jobs)
        .values("job_id")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("job_id", "n")
    )
