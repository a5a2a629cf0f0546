"""Reads about pod execution for the health panel: work the platform has not caught up with."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Min

from apps.agent.models import PodProcess
from apps.jobs.models import Job, JobStatus


@dataclass(frozen=True)
class Behind:
    """One kind of work waiting longer than it should: how many, since when, and where."""

    what: str
    count: int
    oldest: datetime | None
    where: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.count == 0


def backlog(*, now: datetime) -> list[Behind]:
    """Pod starts no agent has taken up, claims whose process never started, and jobs not
    admitted, each once it waits longer than HEALTH_BEHIND_SECONDS (an agent or a worker is
    down or behind: the reconcile and the admission sweep normally take them within
    seconds). A few aggregate queries, whatever the size of the tables."""
    cutoff = now - timedelta(seconds=settings.HEALTH_BEHIND_SECONDS)
    found = []
    for state, what in (
        (PodProcess.State.QUEUED, "Pod starts waiting for an agent"),
        (PodProcess.State.STARTING, "Pods claimed but not started"),
    ):
        stale = PodProcess.objects.filter(state=state, queued_at__lt=cutoff)
        summary = stale.aggregate(n=Count("pk"), oldest=Min("queued_at"))
        queues = (
            stale.values("queue").annotate(n=Count("pk")).order_by("-n", "queue")[:5]
            if summary["n"]
            else []
        )
        found.append(
            Behind(
                what=what,
                count=summary["n"],
                oldest=summary["oldest"],
                where=tuple(f"{q['queue']} ({q['n']})" for q in queues),
            )
        )
    creating = Job.objects.filter(status=JobStatus.CREATING, submitted_at__lt=cutoff)
    summary = creating.aggregate(n=Count("pk"), oldest=Min("submitted_at"))
    found.append(
        Behind(
            what="Jobs not yet admitted (Creating)", count=summary["n"], oldest=summary["oldest"]
        )
    )
    return found
