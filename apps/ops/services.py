"""Apply a checked cluster file: instance types, pools, nodes, the quota tree, workspaces,
users, access keys, images and the market's parameters, in one transaction."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.fernet import InvalidToken
from django.contrib.auth import get_user_model
from django.db import models, transaction

from apps.cluster.clusterfile import ClusterDeclaration, MarketDecl, UserDecl
from apps.cluster.models import Image, InstanceType, MarketParameters, Node, Quota, ResourcePool
from apps.market.services import market_params_set
from apps.workspaces.models import AccessKey, Membership, Workspace

KINDS = (
    "instance types",
    "pools",
    "nodes",
    "workspaces",
    "quotas",
    "users",
    "memberships",
    "access keys",
    "images",
    "market",
)
OUTCOMES = ("created", "updated", "unchanged")


@dataclass
class ApplyReport:
    """How many objects of each kind the apply created, updated or left unchanged, and what
    changed (never a password or a secret, only that it changed)."""

    counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: {kind: dict.fromkeys(OUTCOMES, 0) for kind in KINDS}
    )
    changes: list[str] = field(default_factory=list)

    def record(self, kind: str, outcome: str, label: str, detail: str = "") -> None:
        self.counts[kind][outcome] += 1
        if outcome != "unchanged":
            self.changes.append(
                f"{outcome} {kind.removesuffix('s')} {label}" + (f": {detail}" if detail else "")
            )

    def total(self, outcome: str) -> int:
        return sum(c[outcome] for c in self.counts.values())

    @property
    def changed(self) -> bool:
        return bool(self.total("created") or self.total("updated"))


@transaction.atomic
def cluster_apply(*, declaration: ClusterDeclaration) -> ApplyReport:
    """Create or update everything the declaration names, in one transaction.

    Objects absent from the declaration are left alone: nothing is ever deleted, and a
    node's status and heartbeat (operational state) are never touched.
    """
    report = ApplyReport()
    for t in declaration.instance_types:
        _upsert(
            report,
            "instance types",
            InstanceType,
            t.name,
            name=t.name,
            values={
                "resource_type": t.resource_type,
                "cpu": t.cpu,
                "memory": t.memory,
                "gpu": t.gpu,
                "gpu_model": t.gpu_model,
                "price_per_hour": t.price_per_hour,
                "public_capacity": t.public_capacity,
                "spot_enabled": t.spot_enabled,
            },
        )
    for p in declaration.pools:
        _upsert(
            report,
            "pools",
            ResourcePool,
            p.name,
            name=p.name,
            values={"kind": p.kind, "resource_type": p.resource_type},
        )

    pools = _ids(
        ResourcePool, {n.pool for n in declaration.nodes} | {q.pool for q in declaration.quotas}
    )
    types = _ids(InstanceType, {n.instance_type for n in declaration.nodes if n.instance_type})
    for n in declaration.nodes:
        _upsert(
            report,
            "nodes",
            Node,
            n.name,
            name=n.name,
            values={
                "pool_id": pools[n.pool],
                "instance_type_id": types.get(n.instance_type),
                "cpu": n.cpu,
                "memory": n.memory,
                "gpu": n.gpu,
                "gpu_model": n.gpu_model,
            },
        )

    for w in declaration.workspaces:
        _upsert(
            report,
            "workspaces",
            Workspace,
            w.name,
            name=w.name,
            values={"display_name": w.display_name, "description": w.description},
        )
    workspaces = _ids(
        Workspace,
        {ws for q in declaration.quotas for ws in q.workspaces}
        | {ws for u in declaration.users for ws, _ in u.memberships},
    )

    quotas = _ids(Quota, {q.parent for q in declaration.quotas if q.parent})
    for q in declaration.quotas:  # parents first, so each parent exists when its child is saved
        quota, outcome, detail = _upsert(
            report,
            "quotas",
            Quota,
            q.name,
            name=q.name,
            record=False,
            values={
                "parent_id": quotas[q.parent] if q.parent else None,
                "pool_id": pools[q.pool],
                "resource_type": q.resource_type,
                "min_cpu": q.min.cpu,
                "min_memory": q.min.memory,
                "min_gpu": q.min.gpu,
                "queue_strategy": q.queue_strategy,
            },
        )
        quotas[q.name] = quota.pk
        linked = set(quota.workspaces.values_list("pk", flat=True))
        added = [ws for ws in q.workspaces if workspaces[ws] not in linked]
        if added:
            quota.workspaces.add(*(workspaces[ws] for ws in added))
            if outcome == "unchanged":
                outcome = "updated"
            detail = ", ".join(filter(None, [detail, "workspaces +" + " +".join(added)]))
        report.record("quotas", outcome, q.name, "" if outcome == "created" else detail)

    for u in declaration.users:
        user = _user_apply(report, u)
        for ws, role in u.memberships:
            _upsert(
                report,
                "memberships",
                Membership,
                f"{u.username} in {ws}",
                user_id=user.pk,
                workspace_id=workspaces[ws],
                values={"role": role},
            )

    users = _ids(
        get_user_model(),
        {k.user for k in declaration.access_keys},
        field=get_user_model().USERNAME_FIELD,
    )
    for k in declaration.access_keys:
        _access_key_apply(
            report,
            k.key_id,
            user_id=users[k.user],
            secret=k.secret,
            values={"description": k.description, "enabled": k.enabled},
        )
    for i in declaration.images:
        _upsert(
            report,
            "images",
            Image,
            i.name,
            name=i.name,
            values={"uri": i.uri, "description": i.description},
        )
    if declaration.market is not None:
        _market_apply(report, declaration.market)
    return report


def _market_apply(report: ApplyReport, m: MarketDecl) -> None:
    """The market's parameters: one row, created the first time (until then the market runs
    on its defaults), updated where the file differs."""
    values = {
        "floor_ratio": m.floor_ratio,
        "smoothing": m.smoothing,
        "volatility": m.volatility,
        "sensitivity": m.sensitivity,
        "average_window_seconds": m.average_window_seconds,
    }
    row = MarketParameters.objects.select_for_update().filter(pk=1).first()
    changed = values if row is None else {f: v for f, v in values.items() if getattr(row, f) != v}
    if changed:
        market_params_set(**changed)
    outcome = "created" if row is None else "updated" if changed else "unchanged"
    detail = (
        ""
        if row is None
        else ", ".join(f"{f} {_show(getattr(row, f))} → {_show(v)}" for f, v in changed.items())
    )
    report.record("market", outcome, "parameters", detail)


def _upsert[M: models.Model](
    report: ApplyReport,
    kind: str,
    model: type[M],
    label: str,
    *,
    values: dict,
    record: bool = True,
    **lookup,
) -> tuple[M, str, str]:
    """Create the row `lookup` names with `values`, or update the fields that differ."""
    obj = model._default_manager.filter(**lookup).first()
    if obj is None:
        obj = model._default_manager.create(**lookup, **values)
        outcome, detail = "created", ""
    else:
        changed = {f: (getattr(obj, f), v) for f, v in values.items() if getattr(obj, f) != v}
        for f, (_, new) in changed.items():
            setattr(obj, f, new)
        if changed:
            obj.save(update_fields=list(changed))
        outcome = "updated" if changed else "unchanged"
        detail = ", ".join(f"{f} {_show(old)} → {_show(new)}" for f, (old, new) in changed.items())
    if record:
        report.record(kind, outcome, label, detail)
    return obj, outcome, detail


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _user_apply(report: ApplyReport, u: UserDecl):
    User = get_user_model()
    values = {"email": u.email, "is_staff": u.is_staff, "is_superuser": u.is_superuser}
    user, outcome, detail = _upsert(
        report,
        "users",
        User,
        u.username,
        values=values,
        record=False,
        **{User.USERNAME_FIELD: u.username},
    )
    if outcome == "created":
        if u.password is None:
            user.set_unusable_password()
        else:
            user.set_password(u.password)
        user.save(update_fields=["password"])
    elif u.password is not None and not user.check_password(u.password):
        user.set_password(u.password)
        user.save(update_fields=["password"])
        outcome = "updated"
        detail = ", ".join(filter(None, [detail, "password changed"]))
    report.record("users", outcome, u.username, detail)
    return user


def _access_key_apply(
    report: ApplyReport, key_id: str, *, user_id: int, secret: str, values: dict
) -> None:
    key, outcome, detail = _upsert(
        report,
        "access keys",
        AccessKey,
        key_id,
        key_id=key_id,
        values={"user_id": user_id, **values},
        record=False,
    )
    if outcome == "created" or _secret_of(key) != secret:
        key.set_secret(secret)
        key.save(update_fields=["secret_encrypted"])
        if outcome != "created":
            outcome = "updated"
            detail = ", ".join(filter(None, [detail, "secret changed"]))
    report.record("access keys", outcome, key_id, detail)


def _secret_of(key: AccessKey) -> str | None:
    try:
        return key.secret()
    except InvalidToken:  # encrypted under another ACCESS_KEY_ENCRYPTION_SECRET
        return None


def _ids(model: type[models.Model], names: Iterable[str], *, field: str = "name") -> dict:
    rows = model._default_manager.filter(**{f"{field}__in": set(names)})
    return {getattr(o, field): o.pk for o in rows}
