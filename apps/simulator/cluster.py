"""The cluster a trace is replayed on: engine nodes and the quota tree, and which quota each job
of the trace belongs to.

Nodes come from a node list (trace.py) or from the dedicated pools of a cluster file, the
same TOML `manage.py apply_cluster` reads, checked by its rules; quotas from the cluster
file's `[quotas]`, or made up: one quota holding the whole cluster, N equal quotas, or one
per QoS class.
"""

from __future__ import annotations

import tomllib
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from apps.cluster.clusterfile import ClusterState, NodeDecl, PoolDecl, cluster_file_check
from apps.scheduler.engine import Node, QueueStrategy, Quota, Resources
from apps.simulator.trace import TraceJob, TraceNode

ROOT = "cluster"  # the root of made-up quota trees


class ClusterError(ValueError):
    """A cluster file or quota rule that cannot be used; the message names the place."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """Engine nodes and quotas, ready for a snapshot. `leaves`: the quotas jobs are assigned
    to by rule (those without children), in file order."""

    nodes: tuple[Node, ...]
    node_names: tuple[str, ...]
    quotas: tuple[Quota, ...]
    leaves: tuple[str, ...]

    @property
    def gpus(self) -> int:
        return sum(n.capacity.gpu for n in self.nodes)

    def quota_id(self, name: str) -> int | None:
        return next((q.id for q in self.quotas if q.name == name), None)


def engine_nodes(nodes: Sequence[TraceNode], pool_id: int = 1) -> tuple[Node, ...]:
    return tuple(
        Node(id=i + 1, pool_id=pool_id, capacity=Resources(cpu=n.cpu, memory=n.memory, gpu=n.gpu))
        for i, n in enumerate(nodes)
    )


def made_up_cluster(
    nodes: Sequence[TraceNode],
    *,
    quotas: int | Sequence[str] = 1,
    strategy: QueueStrategy = "BestEffortFIFO",
) -> Cluster:
    """The node list with a made-up quota tree: a root holding the whole cluster and
    `quotas` equal children (a count, named q0, q1, …, or names, e.g. the QoS classes). One
    quota is the root alone."""
    engine = engine_nodes(nodes)
    total = Resources(
        cpu=sum(n.cpu for n in nodes),
        memory=sum(n.memory for n in nodes),
        gpu=sum(n.gpu for n in nodes),
    )
    names = [f"q{i}" for i in range(quotas)] if isinstance(quotas, int) else list(quotas)
    if not names:
        raise ClusterError("at least one quota is needed")
    root = Quota(id=1, name=ROOT, parent_id=None, pool_id=1, min=total, strategy=strategy)
    if len(names) == 1 and isinstance(quotas, int):
        return Cluster(engine, tuple(n.name for n in nodes), (root,), (ROOT,))
    k = len(names)
    share = Resources(cpu=total.cpu // k, memory=total.memory // k, gpu=total.gpu // k)
    children = tuple(
        Quota(id=i + 2, name=name, parent_id=1, pool_id=1, min=share, strategy=strategy)
        for i, name in enumerate(names)
    )
    return Cluster(engine, tuple(n.name for n in nodes), (root, *children), tuple(names))


def assign_quota(job: TraceJob, cluster: Cluster, rule: str) -> str:
    """The quota a job runs in: its own `quota` column if it has one, else by `rule`:
    "hash" (a stable hash of its name over the leaf quotas) or "qos" (the quota named
    after its QoS class)."""
    if job.quota is not None:
        if cluster.quota_id(job.quota) is None:
            raise ClusterError(f"job {job.name}: unknown quota {job.quota}")
        return job.quota
    if rule == "qos":
        for name in cluster.leaves:
            if name.lower() == job.qos.lower():
                return name
        raise ClusterError(f"job {job.name}: no quota named after its QoS class {job.qos!r}")
    if rule == "hash":
        return cluster.leaves[zlib.crc32(job.name.encode()) % len(cluster.leaves)]
    raise ClusterError(f"unknown quota rule {rule!r} (expected hash or qos)")


# --- the cluster file ---------------------------------------------------------------------

# What a replay does not read: left out before the file is checked (a user's password_env
# need not be set to replay a trace).
NOT_REPLAYED = ("users", "access_keys", "images", "market")
NODE_LIST = "node list"  # the pool the root quotas use when a node list is given
_SHOWN = 5  # problems named in one error; the rest are counted


def read_cluster_file(path: str | Path, *, nodes: Sequence[TraceNode] | None = None) -> Cluster:
    """The dedicated pools and the quota tree of a cluster file. With `nodes` (a node list),
    those nodes make up the one pool every quota root uses, and the file's pools are not
    read."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ClusterError(f"{path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ClusterError(f"{path}: {e}") from e
    return cluster_from_toml(data, nodes=nodes)


def cluster_from_toml(
    data: Mapping[str, Any], *, nodes: Sequence[TraceNode] | None = None
) -> Cluster:
    """The cluster a parsed cluster file declares, checked by `apply_cluster`'s own rules
    (`cluster_file_check`) on the sections a replay reads: a file the simulator takes is
    one `apply_cluster` would take, and the same mistake gets the same message."""
    data = {k: v for k, v in data.items() if k not in NOT_REPLAYED}
    existing = None
    if nodes is not None:
        data, existing = _on_node_list(data, nodes)
    declaration, problems = cluster_file_check(data, existing=existing)
    if declaration is None:
        shown = "; ".join(problems[:_SHOWN])
        more = len(problems) - _SHOWN
        raise ClusterError(shown + (f" (and {more} more)" if more > 0 else ""))
    if nodes is not None:
        listed = list(nodes)
        engine = engine_nodes(listed)
        pool_ids = {NODE_LIST: 1}
    else:
        pool_ids = {}
        for pool in declaration.pools:
            if pool.kind == "dedicated":
                pool_ids[pool.name] = len(pool_ids) + 1
        declared = [n for n in declaration.nodes if n.pool in pool_ids]
        if not declared:
            raise ClusterError("pools: no dedicated pool has nodes (give a node list instead)")
        listed = [TraceNode(n.name, n.cpu, n.memory, n.gpu, n.gpu_model) for n in declared]
        engine = tuple(
            Node(id=i + 1, pool_id=pool_ids[n.pool], capacity=Resources(n.cpu, n.memory, n.gpu))
            for i, n in enumerate(declared)
        )
    by_name = {q.name: q for q in declaration.quotas}  # parents first
    ids = {name: i + 1 for i, name in enumerate(data.get("quotas", {}))}  # file order
    quotas = tuple(
        Quota(
            id=ids[q.name],
            name=q.name,
            parent_id=None if q.parent is None else ids[q.parent],
            pool_id=pool_ids[q.pool],
            min=Resources(cpu=q.min.cpu, memory=q.min.memory, gpu=q.min.gpu),
            strategy=cast(QueueStrategy, q.queue_strategy),  # checked against its choices
        )
        for q in (by_name[name] for name in ids)
    )
    if not quotas:
        raise ClusterError("quotas: the cluster file declares no quota")
    parents = {q.parent_id for q in quotas}
    leaves = tuple(q.name for q in quotas if q.id not in parents)
    return Cluster(engine, tuple(n.name for n in listed), quotas, leaves)


def _on_node_list(
    data: dict[str, Any], nodes: Sequence[TraceNode]
) -> tuple[dict[str, Any], ClusterState]:
    """The file as checked when a node list stands in for its pools: the pools and instance
    types are not read, every root quota's pool is the node list (of no resource type:
    quotas' own are not read either), and the node list is what the roots must fit."""
    quotas = data.get("quotas")
    if isinstance(quotas, dict):
        rewritten = {}
        for name, body in quotas.items():
            if isinstance(body, dict):
                body = {k: v for k, v in body.items() if k not in ("pool", "resource_type")}
                if body.get("parent") is None:
                    body["pool"] = NODE_LIST
            rewritten[name] = body
        quotas = rewritten
    kept = {k: v for k, v in data.items() if k not in ("pools", "instance_types", "quotas")}
    if quotas is not None:
        kept["quotas"] = quotas
    pool = PoolDecl(NODE_LIST, "dedicated", "")
    listed = {
        str(i): NodeDecl(str(i), NODE_LIST, None, n.cpu, n.memory, n.gpu, n.model)
        for i, n in enumerate(nodes)
    }
    return kept, ClusterState(pools={NODE_LIST: pool}, nodes=listed)
