"""The cluster a trace is replayed on: engine nodes and the quota tree, and which quota each job
of the trace belongs to.

Nodes come from a node list (trace.py) or from the dedicated pools of a cluster file, the
same TOML `manage.py apply_cluster` reads; quotas from the cluster file's `[quotas]`, or made
up: one quota holding the whole cluster, N equal quotas, or one per QoS class. This reads
only the parts of the cluster file a replay needs (instance types, dedicated pools and their
node groups, quotas) and checks only what it reads; `apply_cluster` checks the whole file.
"""

from __future__ import annotations

import tomllib
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, cast

from apps.core.limits import MAX_NODE_GPUS, MAX_NODES
from apps.scheduler.engine import Node, QueueStrategy, Quota, Resources
from apps.simulator.trace import TraceJob, TraceNode

ROOT = "cluster"  # the root of made-up quota trees
STRATEGIES = ("StrictFIFO", "BestEffortFIFO")


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


def read_cluster_file(path: str | Path, *, nodes: Sequence[TraceNode] | None = None) -> Cluster:
    """The dedicated pools and the quota tree of a cluster file. With `nodes` (a node list),
    those nodes make up the one pool every quota root uses, and the file's node groups are
    not read."""
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
    pool_ids: dict[str, int] = {}
    if nodes is not None:
        listed = list(nodes)
        engine = list(engine_nodes(listed))
    else:
        listed, engine = [], []
        types = _table(data, "instance_types")
        for pool_name, pool in _table(data, "pools").items():
            if _table(data, f"pools.{pool_name}", pool).get("kind") != "dedicated":
                continue
            pool_ids[pool_name] = len(pool_ids) + 1
            for i, group in enumerate(pool.get("nodes", [])):
                where = f"pools.{pool_name}.nodes[{i}]"
                for node in _node_group(group, types, where):
                    if len(listed) == MAX_NODES:
                        raise ClusterError(f"{where}: more than {MAX_NODES} nodes")
                    listed.append(node)
                    engine.append(
                        Node(
                            id=len(engine) + 1,
                            pool_id=pool_ids[pool_name],
                            capacity=Resources(cpu=node.cpu, memory=node.memory, gpu=node.gpu),
                        )
                    )
        if not engine:
            raise ClusterError("pools: no dedicated pool has nodes (give a node list instead)")
    quotas = _quotas(_table(data, "quotas"), pool_ids, one_pool=nodes is not None)
    parents = {q.parent_id for q in quotas}
    leaves = tuple(q.name for q in quotas if q.id not in parents)
    return Cluster(tuple(engine), tuple(n.name for n in listed), tuple(quotas), leaves)


def _quotas(table: Mapping[str, Any], pool_ids: dict[str, int], *, one_pool: bool) -> list[Quota]:
    if not table:
        raise ClusterError("quotas: the cluster file declares no quota")
    ids = {name: i + 1 for i, name in enumerate(table)}
    raw = {name: _table(table, f"quotas.{name}", q) for name, q in table.items()}

    def pool_of(name: str, seen: tuple[str, ...] = ()) -> int:
        q = raw[name]
        if name in seen:
            raise ClusterError(f"quotas.{name}: is its own ancestor")
        if q.get("parent") is not None:
            return pool_of(q["parent"], (*seen, name))
        if one_pool:
            return 1
        pool = q.get("pool")
        if pool not in pool_ids:
            raise ClusterError(f"quotas.{name}.pool: no dedicated pool {pool!r}")
        return pool_ids[pool]

    out = []
    for name, q in raw.items():
        parent = q.get("parent")
        if parent is not None and parent not in ids:
            raise ClusterError(f"quotas.{name}.parent: unknown quota {parent!r}")
        strategy = q.get("queue_strategy", "StrictFIFO")
        if strategy not in STRATEGIES:
            raise ClusterError(f"quotas.{name}.queue_strategy: expected one of {STRATEGIES}")
        m = _table(q, f"quotas.{name}.min", q.get("min", {}))
        out.append(
            Quota(
                id=ids[name],
                name=name,
                parent_id=None if parent is None else ids[parent],
                pool_id=pool_of(name),
                min=Resources(
                    cpu=_amount(m, "cpu", 1000, f"quotas.{name}.min"),
                    memory=_amount(m, "memory_gib", 1024, f"quotas.{name}.min"),
                    gpu=_amount(m, "gpu", 1, f"quotas.{name}.min"),
                ),
                strategy=cast(QueueStrategy, strategy),
            )
        )
    return out


def _node_group(group: Any, types: Mapping[str, Any], where: str) -> list[TraceNode]:
    g = _table({}, where, group)
    if "instance_type" in g:
        t = types.get(g["instance_type"])
        if t is None:
            raise ClusterError(f"{where}.instance_type: unknown {g['instance_type']!r}")
        shape = _table(types, f"instance_types.{g['instance_type']}", t)
    else:
        shape = g
    cpu = _amount(shape, "vcpus", 1000, where)
    memory = _amount(shape, "memory_gib", 1024, where)
    gpu = _amount(shape, "gpu", 1, where)
    if gpu > MAX_NODE_GPUS:
        raise ClusterError(f"{where}.gpu: at most {MAX_NODE_GPUS} GPUs on one node")
    if "name" in g:
        names = [str(g["name"])]
    else:
        start, count = g.get("start", 0), g.get("count", 0)
        if not isinstance(count, int) or not isinstance(start, int) or count < 1:
            raise ClusterError(f"{where}: a node group needs name, or prefix and count ≥ 1")
        if count > MAX_NODES:
            raise ClusterError(f"{where}.count: at most {MAX_NODES} nodes")
        names = [f"{g.get('prefix', '')}{start + i}" for i in range(count)]
    return [TraceNode(name=n, cpu=cpu, memory=memory, gpu=gpu) for n in names]


def _table(parent: Mapping[str, Any], where: str, value: Any = None) -> dict[str, Any]:
    value = parent.get(where, {}) if value is None else value
    if not isinstance(value, dict):
        raise ClusterError(f"{where}: expected a table")
    return value


def _amount(table: Mapping[str, Any], key: str, unit: int, where: str) -> int:
    value = table.get(key, 0)
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ClusterError(f"{where}.{key}: must be a number") from None
    if isinstance(value, bool) or not number.is_finite() or number < 0:
        raise ClusterError(f"{where}.{key}: must be a number ≥ 0")
    return int(number * unit)
