"""Reads of the cluster: instance types, the images it suggests, the quotas a user's
workspaces use, what the cluster file is checked against, and the market's tuning."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db.models import Model, OuterRef, Prefetch, QuerySet, Subquery

from apps.cluster.clusterfile import (
    ClusterState,
    InstanceTypeDecl,
    NodeDecl,
    PoolDecl,
    QuotaDecl,
    Resources,
)
from apps.cluster.models import (
    Image,
    InstanceType,
    MarketParameters,
    Node,
    OriginalPrice,
    Quota,
    ResourcePool,
    ResourceType,
)
from apps.core import pricing
from apps.core.db import Epoch, ReusedSql
from apps.workspaces.models import AccessKey, Workspace
from apps.workspaces.selectors import workspace_list


def type_price_histories(
    model: type[Model], *, type_ids: Iterable[int], since: datetime, until: datetime
) -> dict[int, list[pricing.PricePoint]]:
    """Each type's price history over [since, until] from `model`'s points (instance_type,
    at, price_per_hour: a step function), starting with the point in force at `since`
    (which may lie before it). Types without any point by `until` are left out."""
    type_ids = list(type_ids)
    if not type_ids:
        return {}
    # Times are read as epoch seconds (`Epoch`): the market tick reads thousands of points.
    points = model._default_manager
    before = points.filter(instance_type=OuterRef("pk"), at__lte=since).order_by("-at")
    firsts = (
        InstanceType.objects.filter(pk__in=type_ids)
        .annotate(
            first_at=Epoch(Subquery(before.values("at")[:1])),
            first_price=Subquery(before.values("price_per_hour")[:1]),
        )
        .values_list("pk", "first_at", "first_price")
    )
    histories: dict[int, list[pricing.PricePoint]] = {}
    for type_id, at, price in firsts:
        if at is not None:
            histories[type_id] = [(at, price)]
    rows = (
        points.filter(instance_type_id__in=type_ids, at__gt=since, at__lte=until)
        .order_by("instance_type_id", "at")
        .annotate(seconds=Epoch("at"))
        .values_list("instance_type_id", "seconds", "price_per_hour")
    )
    for type_id, at, price in rows:
        histories.setdefault(type_id, []).append((at, price))
    return histories


def original_price_histories(
    *, type_ids: Iterable[int], since: datetime, until: datetime
) -> dict[int, list[pricing.PricePoint]]:
    """Each type's original (pay-as-you-go) price history over [since, until], as
    `type_price_histories`, every type included: the first price recorded holds from the
    start, and a type with none recorded (written around `InstanceType.save`) has its
    current price."""
    type_ids = list(type_ids)
    histories = type_price_histories(OriginalPrice, type_ids=type_ids, since=since, until=until)
    for points in histories.values():
        if points[0][0] > since.timestamp():  # recorded since `since` only
            points.insert(0, (float("-inf"), points[0][1]))
    missing = [t for t in type_ids if t not in histories]
    if missing:
        firsts: dict[int, Decimal] = dict(
            InstanceType.objects.filter(pk__in=missing).values_list("pk", "price_per_hour")
        )
        for t, price in (
            OriginalPrice.objects.filter(instance_type_id__in=missing)
            .order_by("instance_type_id", "-at")
            .values_list("instance_type_id", "price_per_hour")
        ):
            firsts[t] = price  # the earliest comes last
        for t, price in firsts.items():
            histories[t] = [(float("-inf"), price)]
    return histories


def instance_type_list(
    *, gpu: bool | None = None, names: Collection[str] = (), resource_type: str = ""
) -> QuerySet[InstanceType]:
    """Every instance type, sold in the public pool or not, narrowed by the filters given:
    with GPUs (True) or without (False), one of `names`, of `resource_type`."""
    types = InstanceType.objects.all()
    if gpu is not None:
        types = types.filter(gpu__gt=0) if gpu else types.filter(gpu=0)
    if names:
        types = types.filter(name__in=list(names))
    if resource_type:
        types = types.filter(resource_type=resource_type)
    return types


def image_list() -> list[Image]:
    """The images the create form suggests, by name."""
    return list(Image.objects.order_by("name"))


@dataclass(frozen=True)
class WorkspaceQuota:
    """A quota that serves some of a user's workspaces, and which of them."""

    quota: Quota  # with its parent
    workspaces: list[Workspace]  # the user's workspaces it serves, by name


def quota_list(*, user, name: str = "", workspace=None) -> list[WorkspaceQuota]:
    """The quotas serving a workspace `user` belongs to (every quota serving a workspace,
    for a superuser), by name; only those whose name contains `name` (any case: the SDK's
    "fuzzy search"), when given, and those serving `workspace` (one of the user's), when
    given. A quota's other workspaces are never named. Two queries."""
    visible = workspace_list(user=user)
    quotas = Quota.objects.filter(workspaces__in=visible).distinct().select_related("parent")
    if name:
        quotas = quotas.filter(name__icontains=name)
    if workspace is not None:
        quotas = quotas.filter(workspaces=workspace)
    quotas = quotas.order_by("name").prefetch_related(
        Prefetch("workspaces", queryset=visible, to_attr="visible_workspaces")
    )
    return [WorkspaceQuota(quota=q, workspaces=q.visible_workspaces) for q in quotas]


def cluster_state(*, busy: Collection[str] = ()) -> ClusterState:
    """The database as plain declarations, for `cluster_file_check(existing=…)`. `busy`: the
    nodes that hold live pods (`apps.jobs.selectors.busy_node_names`, from the layers above
    that know pods), which may not be reshaped."""
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
        busy=frozenset(busy),
    )


def market_params() -> pricing.MarketParams:
    """The market's tuning as the pure core takes it (the admin's or the cluster file's)."""
    return MarketParameters.load().to_params()


# Every CreateJob asks: their SQL is built once (`ReusedSql`). Names are unique.
_quota_type_sql = ReusedSql(
    lambda shape, name: Quota.objects.filter(name=name).values_list("resource_type", flat=True),
    name=str,
)
_instance_type_type_sql = ReusedSql(
    lambda shape, name: InstanceType.objects.filter(name=name).values_list(
        "resource_type", flat=True
    ),
    name=str,
)


def resource_type_of(*, quota: str, instance_type: str) -> str:
    """The resource type a job takes from its quota (by name), else from its instance type;
    ECS when neither names a known one."""
    if quota:
        found = _quota_type_sql(name=quota)
        if found and found[0]:
            return found[0]
    if instance_type:
        found = _instance_type_type_sql(name=instance_type)
        if found and found[0]:
            return found[0]
    return ResourceType.ECS
