"""Reads for What if: the cluster's own jobs as a trace, and the current configuration as the
simulator takes it."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import QuerySet, Sum

from apps.cluster.models import Node, ResourcePool
from apps.jobs.models import Job, JobRestart, JobStatus, ResourceSource, StatusTransition
from apps.scheduler.services import scheduler_cluster
from apps.simulator import DEFAULTS, Cluster, PolicyError, TraceJob, parse_policies
from apps.whatif.models import WhatIfRun


def quota_jobs(*, days: int, now: datetime) -> QuerySet[Job]:
    """The quota jobs submitted in the last `days` days: what a replay of the cluster's own
    jobs reads."""
    return Job.objects.filter(
        resource_source=ResourceSource.QUOTA,
        submitted_at__gte=now - timedelta(days=days),
        submitted_at__isnull=False,
    )


def jobs_trace(*, days: int, now: datetime) -> list[TraceJob]:
    """The quota jobs submitted in the last `days` days as a trace, oldest first: each at its
    submission time (seconds from the first), with the work it did (`_work`; None while it
    still runs), its recorded wait (submission to first start) and its quota, idle mode and
    priority. A job of several roles counts as its pods alike, each shaped like its role
    asking the most GPUs. Jobs stopped before they ever started did no work: left out."""
    chosen = quota_jobs(days=days, now=now)
    jobs = chosen.select_related("quota").prefetch_related("roles").order_by("submitted_at", "id")
    running: dict[int, list[tuple[datetime, datetime | None]]] = {}
    for job_id, start, end in StatusTransition.objects.filter(
        job__in=chosen, status=JobStatus.RUNNING
    ).values_list("job_id", "started_at", "ended_at"):
        running.setdefault(job_id, []).append((start, end))
    redone = dict(
        JobRestart.objects.filter(job__in=chosen)
        .values("job_id")
        .annotate(lost=Sum("lost_gpu_seconds"))
        .values_list("job_id", "lost")
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
        shape = max(roles, key=lambda r: (r.gpus, r.cpu, r.memory))
        gpus = sum(r.pod_count * (r.gpu or r.gpu_milli / 1000) for r in roles)
        duration = _work(job, running.get(job.pk, []), redone.get(job.pk) or 0.0, gpus)
        waited = None
        if job.started_at is not None:
            waited = max((job.started_at - job.submitted_at).total_seconds(), 0.0)
        trace.append(
            TraceJob(
                name=job.job_id,
                submit=(job.submitted_at - first).total_seconds(),
                duration=duration,
                gpu=shape.gpu or (1 if shape.gpu_milli else 0),  # a share: one GPU, rounded up
                gpu_milli=shape.gpu_milli or shape.gpu * 1000,
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


def _work(
    job: Job, running: list[tuple[datetime, datetime | None]], lost_gpu_seconds: float, gpus: float
) -> float | None:
    """The seconds of work a job needed, for a replay: the time it spent Running over all its
    attempts (not the time from its first start to its end, which counts its waits in the
    queue after a preemption), less the work its interruptions threw away and it did again
    (their lost GPU-seconds over its GPUs). None while it still runs. A job with no Running
    spans recorded: start to finish."""
    if job.finished_at is None:
        return None
    if running:
        ran = sum(((end or job.finished_at) - start).total_seconds() for start, end in running)
        if gpus:
            ran -= lost_gpu_seconds / gpus
        return max(ran, 1.0)
    if job.started_at is None:
        return None
    return max((job.finished_at - job.started_at).total_seconds(), 1.0)


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


def current_cluster_file() -> str:
    """The current configuration as the part of a cluster file a run reads (dedicated pools
    with their nodes, the quota tree), to start the changed one from. Runs of nodes named
    prefix + consecutive numbers with one shape are written as one node group."""
    cluster = current_cluster()
    pools, types = {}, {}
    for pk, name, resource_type in ResourcePool.objects.values_list("pk", "name", "resource_type"):
        pools[pk], types[pk] = name, resource_type
    names = {q.id: q.name for q in cluster.quotas}
    lines = [
        "# The current dedicated pools and quota tree; change what the run should try.",
        "# The format is the cluster file's (examples/demo-cluster.toml explains it).",
    ]
    by_pool: dict[int, list[tuple[str, tuple[int, int, int], str]]] = {}
    models = dict(
        Node.objects.filter(pk__in=[n.id for n in cluster.nodes]).values_list("pk", "gpu_model")
    )
    for node, name in zip(cluster.nodes, cluster.node_names, strict=True):
        c = node.capacity
        by_pool.setdefault(node.pool_id, []).append(
            (name, (c.cpu, c.memory, c.gpu), models.get(node.id, ""))
        )
    for pool_id, nodes in by_pool.items():
        pool = _key(pools[pool_id])
        lines += ["", f"[pools.{pool}]", 'kind = "dedicated"']
        lines.append(f"resource_type = {json.dumps(types[pool_id])}")
        for prefix, start, count, (cpu, memory, gpu), model in _node_runs(nodes):
            lines += ["", f"[[pools.{pool}.nodes]]"]
            if count == 1 and start is None:
                lines.append(f"name = {json.dumps(prefix)}")
            else:
                lines += [f"prefix = {json.dumps(prefix)}", f"start = {start}", f"count = {count}"]
            lines.append(f"vcpus = {_number(cpu, 1000)}")
            lines.append(f"memory_gib = {_number(memory, 1024)}")
            lines.append(f"gpu = {gpu}")
            if model:
                lines.append(f"gpu_model = {json.dumps(model)}")
            elif gpu:  # the file requires one where there are GPUs
                lines.append(f"gpu_model = {json.dumps(UNKNOWN_MODEL)}  # not set on the node")
    for quota in cluster.quotas:
        lines += ["", f"[quotas.{_key(quota.name)}]"]
        if quota.parent_id is None:
            lines.append(f"pool = {json.dumps(pools[quota.pool_id])}")
        else:
            lines.append(f"parent = {json.dumps(names[quota.parent_id])}")
        m = quota.min
        lines.append(
            f"min = {{ gpu = {m.gpu}, cpu = {_number(m.cpu, 1000)}, "
            f"memory_gib = {_number(m.memory, 1024)} }}"
        )
        lines.append(f"queue_strategy = {json.dumps(quota.strategy)}")
    return "\n".join(lines) + "\n"


UNKNOWN_MODEL = "unknown"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _number(amount: int, unit: int) -> str:
    """Millicores as cores, MiB as GiB: exact (a quotient by 1000 or 1024 always ends)."""
    value = Decimal(amount) / Decimal(unit)
    return str(value.to_integral_value()) if value == value.to_integral_value() else str(value)


def _node_runs(nodes):
    """(prefix, start, count, shape, gpu model) groups; start None for a lone named node."""
    runs: list[list] = []
    for name, shape, model in nodes:
        numbered = _NUMBERED.match(name)
        # a number with a leading zero (gpu-01) would not be written back alike: named alone
        if not numbered or str(int(numbered.group(2))) != numbered.group(2):
            runs.append([name, None, 1, shape, model])
            continue
        prefix, number = numbered.group(1), int(numbered.group(2))
        last = runs[-1] if runs else None
        if (
            last is not None
            and last[1] is not None
            and (last[0], last[3], last[4]) == (prefix, shape, model)
            and number == last[1] + last[2]
        ):
            last[2] += 1
        else:
            runs.append([prefix, number, 1, shape, model])
    return [tuple(r) for r in runs]


def whatif_runs(*, limit: int = 50) -> list[WhatIfRun]:
    return list(WhatIfRun.objects.select_related("created_by")[:limit])


def default_policies(mode: str) -> str:
    """The mode's default policies. A replay compares victim orders: each is placed as the
    live scheduler places (SCHEDULER_PLACEMENT), with FGD's workload drawn as it draws it
    (SCHEDULER_WORKLOAD_HOURS); fill mode compares the placements themselves."""
    text = DEFAULTS[mode]
    if mode != "replay" or settings.SCHEDULER_PLACEMENT == "best_fit":
        return text
    live = f"+placement={settings.SCHEDULER_PLACEMENT}"
    live += f"+workload_hours={settings.SCHEDULER_WORKLOAD_HOURS:g}"
    return ",".join(f"{name}{live}+name={name}" for name in text.split(","))


def whatif_policy_names(run: WhatIfRun) -> list[str]:
    """The names of the policies a run compares: those its summary reports once it has run,
    else those it will run (its own, or its mode's default as the run would read it)."""
    ran = [p["policy"] for p in (run.current or {}).get("policies", [])]
    if ran:
        return ran
    try:
        return [p.name for p in parse_policies(run.policies or default_policies(run.mode))]
    except PolicyError:  # kept from before the form checked them: the run will say why
        return [run.policies]
