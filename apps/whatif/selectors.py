"""Reads for What if: the cluster's own jobs as a trace, and the current configuration as the
simulator takes it."""

from __future__ import annotations

from datetime import datetime, timedelta

from apps.cluster.models import Node
from apps.jobs.models import Job, ResourceSource
from apps.scheduler.services import scheduler_cluster
from apps.simulator import Cluster, TraceJob
from apps.whatif.models import WhatIfRun


def jobs_trace(*, days: int, now: datetime) -> list[TraceJob]:
    """The quota jobs submitted in the last `days` days as a trace, oldest first: each at its
    submission time (seconds from the first), with the work it did (start to finish; None
    while it still runs), its recorded wait (submission to first start) and its quota, idle
    mode and priority. A job of several roles counts as its pods alike, each shaped like its
    role asking the most GPUs. Jobs stopped before they ever started did no work: left out."""
    jobs = (
        Job.objects.filter(
            resource_source=ResourceSource.QUOTA,
            submitted_at__gte=now - timedelta(days=days),
            submitted_at__isnull=False,
        )
        .select_related("quota")
        .prefetch_related("roles")
        .order_by("submitted_at", "id")
    )
    trace: list[TraceJob] = []
    first: datetime | None = None
    for job in jobs:
        roles = list(job.roles.all())
        if not roles or job.submitted_at is None:
            continue
        if job.started_at is None and job.finished_at is not None:
            continue  # ended without running
        first = first or job.submitted_at
        shape = max(roles, key=lambda r: (r.gpu, r.cpu, r.memory))
        duration = None
        if job.started_at is not None and job.finished_at is not None:
            duration = max((job.finished_at - job.started_at).total_seconds(), 1.0)
        waited = None
        if job.started_at is not None:
            waited = max((job.started_at - job.submitted_at).total_seconds(), 0.0)
        trace.append(
            TraceJob(
                name=job.job_id,
                submit=(job.submitted_at - first).total_seconds(),
                duration=duration,
                gpu=shape.gpu,
                gpu_milli=shape.gpu * 1000,
                cpu=shape.cpu,
                memory=shape.memory,
                pods=sum(r.pod_count for r in roles),
                qos="LS" if job.idle_mode == "off" else "BE",
                quota=job.quota.name if job.quota else None,
                idle_mode=job.idle_mode,
                priority=job.priority,
                recorded_delay=waited,
            )
        )
    return trace


def current_cluster() -> Cluster:
    """The dedicated pools' nodes and the quota tree the live scheduler plans with."""
    nodes, quotas = scheduler_cluster()
    names = dict(Node.objects.filter(pk__in=[n.id for n in nodes]).values_list("pk", "name"))
    parents = {q.parent_id for q in quotas}
    return Cluster(
        nodes=nodes,
        node_names=tuple(names[n.id] for n in nodes),
        quotas=quotas,
        leaves=tuple(q.name for q in quotas if q.id not in parents),
    )


def whatif_runs(*, limit: int = 50) -> list[WhatIfRun]:
    return list(WhatIfRun.objects.select_related("created_by")[:limit])
