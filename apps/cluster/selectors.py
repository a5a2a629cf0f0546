"""Reads of the cluster: what the cluster file is checked against, and the market's tuning."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from apps.cluster.clusterfile import (
    ClusterState,
    InstanceTypeDecl,
    NodeDecl,
    PoolDecl,
    QuotaDecl,
    Resources,
)
from apps.cluster.models import InstanceType, MarketParameters, Node, Quota, ResourcePool
from apps.core import pricing
from apps.workspaces.models import AccessKey, Workspace


def cluster_state() -> ClusterState:
    """The database as plain declarations, for `cluster_file_check(existing=…)`."""
    types = {
        t.name: InstanceTypeDecl(
            t.name,
            t.resource_type,
            t.cpu,
            t.memory,
            t.gpu,
            t.gpu_model,
            t.price_per_hour,
            t.public_capacity,
            t.spot_enabled,
        )
        for t in InstanceType.objects.all()
    }
    pools = {p.name: PoolDecl(p.name, p.kind, p.resource_type) for p in ResourcePool.objects.all()}
    nodes = {
        n.name: NodeDecl(
            n.name,
            n.pool.name,
            n.instance_type.name if n.instance_type else None,
            n.cpu,
            n.memory,
            n.gpu,
            n.gpu_model,
        )
        for n in Node.objects.select_related("pool", "instance_type")
    }
    quotas = {
        q.name: QuotaDecl(
            q.name,
            q.parent.name if q.parent else None,
            q.pool.name,
            q.resource_type,
            Resources(q.min_cpu, q.min_memory, q.min_gpu),
            q.queue_strategy,
        )
        for q in Quota.objects.select_related("parent", "pool")
    }
    User = get_user_model()
    return ClusterState(
        instance_types=types,
        pools=pools,
        nodes=nodes,
        quotas=quotas,
        workspaces=frozenset(Workspace.objects.values_list("name", flat=True)),
        users=frozenset(User.objects.values_list(User.USERNAME_FIELD, flat=True)),
        access_keys=dict(AccessKey.objects.values_list("key_id", f"user__{User.USERNAME_FIELD}")),
    )


def market_params() -> pricing.MarketParams:
    """The market's tuning as the pure core takes it (the admin's or the cluster file's)."""
    return MarketParameters.load().to_params()
