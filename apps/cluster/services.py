"""Writes to the cluster from the admin: node status."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from apps.cluster.models import Node


@transaction.atomic
def node_set_status(*, nodes: Iterable[Node], status: str) -> int:
    """Cordon, uncordon or mark nodes lost from the admin; returns how many changed."""
    ids = [n.pk for n in nodes]
    return Node.objects.filter(pk__in=ids).exclude(status=status).update(status=status)
