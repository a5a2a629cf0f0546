"""Reads about pod execution: work the platform has not caught up with (the health panel),
the pods' metric samples (GetJobMetrics, the job page), and the address each pod is reached
at (GetJob)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby
from operator import itemgetter

from django.conf import settings
from django.db.models import Count, Min, Q

from apps.agent import netns
from apps.agent.metrics import METRIC_TYPES, MetricType, downsample
from apps.agent.models import NodeAgent, PodMetricSample, PodProcess
from apps.core.db import id_chunks
from apps.jobs.models import Job, JobStatus, Pod

# A pod's process an agent has claimed: where it runs (or ran) is known.
CLAIMED_STATES = (
    PodProcess.State.STARTING,
    PodProcess.State.RUNNING,
    PodProcess.State.EXITED,
)


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


@dataclass(frozen=True)
class PodSeries:
    """One pod's series of one metric: (epoch seconds, value), oldest first."""

    pod_id: str
    points: list[tuple[float, float]]


def job_metrics(
    *, job: Job, metric: MetricType, start: datetime, end: datetime, step: float
) -> list[PodSeries]:
    """Each pod's `metric` over [start, end] (current and history pods, by pod id), averaged
    per `step` seconds from `start` (`metrics.downsample`). A pod with no figure of the kind
    there (no GPU, for the GPU metrics) is left out: absent, not zero. The samples are read
    as a stream, so memory follows the steps returned, not the samples read."""
    pods = dict(job.pods.values_list("pk", "pod_id"))
    out = []
    for chunk in id_chunks(sorted(pods, key=lambda pk: pods[pk])):
        rows = (
            PodMetricSample.objects.filter(pod_id__in=chunk, at__gte=start, at__lte=end)
            .exclude(**{f"{metric.field}__isnull": True})
            .order_by("pod_id", "at")
            .values_list("pod_id", "at", metric.field)
        )
        found = {}
        for pod_pk, group in groupby(rows.iterator(chunk_size=5000), key=itemgetter(0)):
            samples = ((at.timestamp(), float(value)) for _, at, value in group)
            found[pod_pk] = downsample(samples, start=start.timestamp(), step=step)
        out += [PodSeries(pods[pk], found[pk]) for pk in chunk if found.get(pk)]
    return out


def job_metrics_all(
    *, job: Job, start: datetime, end: datetime, step: float
) -> dict[str, list[PodSeries]]:
    """Every metric of the job (`job_metrics` for each MetricType), by MetricType name; the
    metrics no pod has a figure of are left out."""
    found = {}
    for metric in METRIC_TYPES:
        series = job_metrics(job=job, metric=metric, start=start, end=end, step=step)
        if series:
            found[metric.name] = series
    return found


# --- where a pod is reached --------------------------------------------------------------


@dataclass(frozen=True)
class PodAddress:
    """The address a pod is reached at by its job's other pods, and the interface of its
    network namespace that holds it (GetJob's Ip, PodIp and PodIps)."""

    ip: str
    interface: str  # "eth0": the job's link between hosts; "lo": one host's loopback


def pod_addresses(*, pods: Sequence[Pod]) -> dict[int, PodAddress]:
    """Per pod id, the address its job's other pods reach it at, as apps/agent/netns.py
    wires a job's network: with the pod subnet (POD_CIDR) of the host whose agent ran it,
    the job's address in that subnet (`netns.job_address`, on every host the same offset,
    routed between hosts for the job's own pods only); without one, the job's namespace on
    that host has only a loopback, so 127.0.0.1 when every launched pod of its attempt ran
    on that one host. A pod no agent has claimed yet, or one whose job spans hosts without a
    pod subnet (its pods cannot reach each other), has none. A host's own addresses are
    never given: no pod can reach its host. Two queries, none without pods."""
    if not pods:  # a job not placed yet: GetJob's polls of a waiting job
        return {}
    processes = {
        pod_id: (agent, host)
        for pod_id, agent, host in PodProcess.objects.filter(
            pod__in=[p.pk for p in pods], state__in=CLAIMED_STATES
        ).values_list("pod_id", "agent", "host")
        if host
    }
    if not processes:
        return {}
    agents = list(
        NodeAgent.objects.filter(
            Q(node_id__in={p.node_id for p in pods if p.node_id})
            | Q(worker__in={agent for agent, _ in processes.values()})
        ).values_list("node_id", "worker", "pod_cidr")
    )
    by_node = {node_id: cidr for node_id, _, cidr in agents}
    by_worker = {worker: cidr for _, worker, cidr in agents if cidr}
    hosts: dict[tuple[int, int], set[str]] = defaultdict(set)
    for pod in pods:
        if pod.pk in processes:
            hosts[(pod.job_id, pod.attempt)].add(processes[pod.pk][1])
    addresses = {}
    for pod in pods:
        if pod.pk not in processes:
            continue
        agent, _ = processes[pod.pk]
        cidr = by_node.get(pod.node_id) if pod.node_id else by_worker.get(agent)
        if cidr:
            addresses[pod.pk] = PodAddress(netns.job_address(cidr, pod.job_id), "eth0")
        elif len(hosts[(pod.job_id, pod.attempt)]) == 1:
            addresses[pod.pk] = PodAddress("127.0.0.1", "lo")
    return addresses
