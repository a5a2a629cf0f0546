"""Reads across the platform for its health page."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.db.models import Count

from apps.cluster.models import Node
from apps.jobs.models import Job


@dataclass(frozen=True)
class ClusterCounts:
    nodes_by_status: dict[str, int]
    jobs_by_status: dict[str, int]
    draining: tuple[str, ...] = ()  # the nodes whose jobs are being moved off

    @property
    def nodes_total(self) -> int:
        return sum(self.nodes_by_status.values())

    @property
    def nodes_named(self) -> list[tuple[str, str, int]]:
        """(status, its name in the reader's language, nodes) per node status."""
        return [(s, str(Node.Status(s).label), n) for s, n in self.nodes_by_status.items()]

    @property
    def jobs_total(self) -> int:
        return sum(self.jobs_by_status.values())


def cluster_counts() -> ClusterCounts:
    """Nodes per status (every status, zeros included), the Draining ones by name, and jobs
    per status (those present)."""
    nodes = Counter({status: 0 for status in Node.Status.values})
    nodes.update(dict(Node.objects.values_list("status").annotate(n=Count("id")).order_by()))
    jobs = dict(Job.objects.values_list("status").annotate(n=Count("id")).order_by("status"))
    draining = Node.objects.filter(status=Node.Status.DRAINING).order_by("name")
    return ClusterCounts(
        nodes_by_status=dict(nodes),
        jobs_by_status=jobs,
        draining=tuple(draining.values_list("name", flat=True)),
    )
