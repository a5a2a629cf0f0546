"""The cluster file: one TOML document declaring instance types, pools and their nodes, the
quota tree, workspaces, users, access keys, the images the create form suggests and the spot
market's parameters (the shape is documented at the top of examples/demo-cluster.toml).

`cluster_file_check(data, existing=…)` reads the parsed TOML and returns typed declarations
and every problem it found as "path: message", the path naming the place in the file
(`quotas.team-a.min.gpu: must be ≥ 0`). Nothing here touches the database: what already
exists comes in as a `ClusterState`, so references may point at objects created earlier
(by another file or in the admin) and the quota-tree rules are checked on the tree as it
will be after the apply. The whole file is checked before anything is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from apps.core.limits import MAX_NODE_GPUS, MAX_NODES
from apps.core.pricing import MarketParams

RESOURCE_TYPES = ("ECS", "Lingjun")
POOL_KINDS = ("dedicated", "public")
QUEUE_STRATEGIES = ("StrictFIFO", "BestEffortFIFO")
ROLES = ("owner", "admin", "member")
SECTIONS = (
    "instance_types",
    "pools",
    "quotas",
    "workspaces",
    "users",
    "access_keys",
    "images",
    "market",
)

SLUG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TYPE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
NODE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
USERNAME = re.compile(r"^[\w.@+-]{1,150}$")
KEY_ID = re.compile(r"^[A-Za-z0-9]{8,64}$")
IMAGE_URI = re.compile(r"[!-~]{1,512}")  # printable ASCII, no spaces: what a job's image takes
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_INT = 2**31 - 1  # PositiveIntegerField on PostgreSQL
MARKET_DEFAULTS = MarketParams()  # pure, like this module


# --- Declarations -------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """CPU in millicores, memory in MiB, GPUs as a count."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def get(self, resource: str) -> int:
        return getattr(self, resource)


# How each resource is written in the file and shown in messages.
RESOURCE_KEYS = {"gpu": "gpu", "cpu": "cpu", "memory": "memory_gib"}


def resource_text(resource: str, amount: int) -> str:
    """8 GPU, 96 cores, 768 GiB: the units the file uses."""
    if resource == "cpu":
        return f"{_trim(Decimal(amount) / 1000)} cores"
    if resource == "memory":
        return f"{_trim(Decimal(amount) / 1024)} GiB"
    return f"{amount} GPU"


@dataclass(frozen=True)
class InstanceTypeDecl:
    name: str
    resource_type: str
    cpu: int
    memory: int
    gpu: int
    gpu_model: str
    price_per_hour: Decimal
    public_capacity: int
    spot_enabled: bool


@dataclass(frozen=True)
class PoolDecl:
    name: str
    kind: str
    resource_type: str


@dataclass(frozen=True)
class NodeDecl:
    name: str
    pool: str
    instance_type: str | None
    cpu: int
    memory: int
    gpu: int
    gpu_model: str

    @property
    def resources(self) -> Resources:
        return Resources(self.cpu, self.memory, self.gpu)


@dataclass(frozen=True)
class QuotaDecl:
    name: str
    parent: str | None
    pool: str
    resource_type: str
    min: Resources
    queue_strategy: str
    workspaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkspaceDecl:
    name: str
    display_name: str
    description: str


@dataclass(frozen=True)
class UserDecl:
    username: str
    email: str
    password: str | None  # None: leave the password as it is (a new user gets none)
    is_staff: bool
    is_superuser: bool
    memberships: tuple[tuple[str, str], ...]  # (workspace, role)


@dataclass(frozen=True)
class AccessKeyDecl:
    key_id: str
    user: str
    secret: str = field(repr=False)
    description: str
    enabled: bool


@dataclass(frozen=True)
class ImageDecl:
    """An image the create form suggests (`[images.<name>]`)."""

    name: str
    uri: str
    description: str


@dataclass(frozen=True)
class MarketDecl:
    """The spot market's tuning (`[market]`); a key left out takes the market's default."""

    floor_ratio: Decimal = MARKET_DEFAULTS.floor_ratio
    smoothing: float = MARKET_DEFAULTS.smoothing
    volatility: float = MARKET_DEFAULTS.volatility
    sensitivity: float = MARKET_DEFAULTS.sensitivity
    average_window_seconds: float = MARKET_DEFAULTS.average_window_seconds


@dataclass(frozen=True)
class ClusterDeclaration:
    """Everything one file declares, each kind in the order it appears in the file."""

    instance_types: tuple[InstanceTypeDecl, ...] = ()
    pools: tuple[PoolDecl, ...] = ()
    nodes: tuple[NodeDecl, ...] = ()
    quotas: tuple[QuotaDecl, ...] = ()  # parents before children
    workspaces: tuple[WorkspaceDecl, ...] = ()
    users: tuple[UserDecl, ...] = ()
    access_keys: tuple[AccessKeyDecl, ...] = ()
    images: tuple[ImageDecl, ...] = ()
    market: MarketDecl | None = None  # None: the file has no [market] table


@dataclass(frozen=True)
class ClusterState:
    """What the database holds already, as plain values (see selectors.cluster_state)."""

    instance_types: Mapping[str, InstanceTypeDecl] = field(default_factory=dict)
    pools: Mapping[str, PoolDecl] = field(default_factory=dict)
    nodes: Mapping[str, NodeDecl] = field(default_factory=dict)
    quotas: Mapping[str, QuotaDecl] = field(default_factory=dict)
    workspaces: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    access_keys: Mapping[str, str] = field(default_factory=dict)  # key id → username
    busy: frozenset[str] = frozenset()  # the nodes with pods on them (Pending or Running)


# --- Paths and typed reads ----------------------------------------------------------------


def path_of(*parts: str | int) -> str:
    """quotas.team-a.min.gpu, instance_types."ecs.g7.xlarge".vcpus, pools.p.nodes[0].count"""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if BARE_KEY.match(part) else '"' + part.replace('"', '\\"') + '"'
            out += ("." if out else "") + key
    return out


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}")

    def __len__(self) -> int:
        return len(self.items)


_MISSING = object()


class _Table:
    """One table of the file: typed getters that record a problem instead of raising.

    Every getter returns a usable value (the default when the input is wrong), and `ok`
    says whether this table produced no problem, so callers build a declaration only from
    a clean table.
    """

    def __init__(self, raw: Any, path: str, problems: Problems, allowed: tuple[str, ...]):
        self.path, self.problems = path, problems
        self._start = len(problems)
        self.raw: dict = raw if isinstance(raw, dict) else {}
        if not isinstance(raw, dict):
            problems.add(path, "must be a table")
        for key in self.raw:
            if key not in allowed:
                problems.add(f"{path}.{key}", f"unknown key (expected {', '.join(allowed)})")

    @property
    def ok(self) -> bool:
        return len(self.problems) == self._start

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def _get(self, key: str, required: bool) -> Any:
        value = self.raw.get(key, _MISSING)
        if value is _MISSING and required:
            self.problems.add(self.at(key), "is required")
        return value

    def text(
        self,
        key: str,
        *,
        default: str = "",
        required: bool = False,
        choices: tuple[str, ...] = (),
        max_length: int = 200,
    ) -> str:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            self.problems.add(self.at(key), "must be a string")
            return default
        if choices and value not in choices:
            self.problems.add(self.at(key), f"must be one of {', '.join(choices)}, not {value!r}")
            return default
        if len(value) > max_length:
            self.problems.add(self.at(key), f"must be at most {max_length} characters")
            return default
        return value

    def flag(self, key: str, *, default: bool) -> bool:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.problems.add(self.at(key), "must be true or false")
            return default
        return value

    def whole(
        self,
        key: str,
        *,
        default: int = 0,
        required: bool = False,
        minimum: int = 0,
        maximum: int = MAX_INT,
    ) -> int:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.add(self.at(key), "must be a whole number")
            return default
        if value < minimum:
            self.problems.add(self.at(key), f"must be ≥ {minimum}")
            return default
        if value > maximum:
            self.problems.add(self.at(key), f"must be ≤ {maximum}")
            return default
        return value

    def scaled(
        self, key: str, *, factor: int, unit: str, required: bool = False, positive: bool = False
    ) -> int:
        """A number of cores or GiB, returned in millicores or MiB (which must be whole)."""
        value = self._get(key, required)
        if value is _MISSING:
            return 0
        number = _number(value)
        if number is None:
            self.problems.add(self.at(key), "must be a number")
            return 0
        if number < 0 or (positive and number == 0):
            self.problems.add(self.at(key), "must be > 0" if positive else "must be ≥ 0")
            return 0
        scaled = number * factor
        if scaled != scaled.to_integral_value():
            self.problems.add(self.at(key), f"must be a whole number of {unit}")
            return 0
        if scaled > MAX_INT:
            self.problems.add(self.at(key), "is too large")
            return 0
        return int(scaled)

    def money(self, key: str, *, required: bool = False) -> Decimal:
        value = self._get(key, required)
        if value is _MISSING:
            return Decimal(0)
        number = _number(value, strings=True)
        if number is None:
            self.problems.add(self.at(key), "must be a number (CNY per instance-hour)")
            return Decimal(0)
        if number < 0:
            self.problems.add(self.at(key), "must be ≥ 0")
            return Decimal(0)
        if number != number.quantize(Decimal("0.0001")) or number >= 10**8:
            self.problems.add(self.at(key), "must have at most 4 decimal places and 8 digits")
            return Decimal(0)
        return number

    def bounded(
        self,
        key: str,
        *,
        default: Decimal,
        low: int,
        high: int | None = None,
        closed_low: bool = False,
        closed_high: bool = True,
        strings: bool = False,
        places: int | None = None,
    ) -> Decimal:
        """A number in the interval from `low` to `high` (open or closed at each end; no
        `high`: unbounded), written as "(0, 1]" in the message."""
        value = self._get(key, False)
        if value is _MISSING:
            return default
        number = _number(value, strings=strings)
        if number is None:
            self.problems.add(self.at(key), "must be a number")
            return default
        above = number >= low if closed_low else number > low
        below = high is None or (number <= high if closed_high else number < high)
        if not (above and below):
            if high is None:
                self.problems.add(self.at(key), f"must be {'≥' if closed_low else '>'} {low}")
            else:
                self.problems.add(
                    self.at(key),
                    f"must be in {'[' if closed_low else '('}{low}, "
                    f"{high}{']' if closed_high else ')'}",
                )
            return default
        if places is not None and number != round(number, places):
            self.problems.add(self.at(key), f"must have at most {places} decimal places")
            return default
        return number

    def table(self, key: str) -> dict:
        value = self._get(key, False)
        if value is _MISSING:
            return {}
        if not isinstance(value, dict):
            self.problems.add(self.at(key), "must be a table")
            return {}
        return value

    def texts(self, key: str) -> list[str]:
        value = self._get(key, False)
        if value is _MISSING:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problems.add(self.at(key), "must be a list of strings")
            return []
        return value


def _number(value: Any, *, strings: bool = False) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, str) and not strings:
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _trim(number: Decimal) -> str:
    text = f"{number:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _entries(data: Mapping, section: str, problems: Problems) -> Iterator[tuple[str, str, Any]]:
    """(name, path, body) for each table of a `[section.<name>]` section."""
    raw = data.get(section, {})
    if not isinstance(raw, dict):
        problems.add(section, "must be a table of named tables")
        return
    for name, body in raw.items():
        yield name, path_of(section, name), body


# --- The check ----------------------------------------------------------------------------


def cluster_file_check(
    data: Mapping[str, Any],
    *,
    existing: ClusterState | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[ClusterDeclaration | None, list[str]]:
    """Check a parsed cluster file; return (declaration, []) or (None, every problem).

    `existing` is what the database holds: the file may refer to it, and the quota rules
    are checked on the tree the apply would leave. `environ` resolves `password_env` and
    `secret_env` (os.environ by default).
    """
    existing = existing or ClusterState()
    environ = os.environ if environ is None else environ
    problems = Problems()
    for key in data:
        if key not in SECTIONS:
            problems.add(path_of(key), f"unknown section (expected {', '.join(SECTIONS)})")

    # A reference to something the file declares with a problem of its own is not reported
    # again as unknown: the problem is listed once, where it is.
    declared = {s: set(data[s]) if isinstance(data.get(s), dict) else set() for s in SECTIONS}
    types = _instance_types(data, problems)
    all_types = {**existing.instance_types, **types}
    pools, nodes, incomplete = _pools(
        data, all_types, declared["instance_types"], existing, problems
    )
    workspaces = _workspaces(data, problems)
    all_workspaces = existing.workspaces | declared["workspaces"]
    all_pools = {**existing.pools, **pools}
    all_nodes = {**existing.nodes, **nodes}
    # Pools whose capacity this file changes: their roots are checked even if not redeclared
    # (but not when a node group of theirs has problems: the capacity is unknown then).
    touched = (
        declared["pools"]
        | {n.pool for n in nodes.values()}
        | {existing.nodes[n].pool for n in nodes if n in existing.nodes}
    )
    quotas = _quotas(
        data,
        all_pools,
        declared["pools"],
        touched - incomplete,
        incomplete,
        all_nodes,
        all_workspaces,
        existing,
        problems,
    )
    _check_pools_keep_their_contents(
        pools, nodes, declared["quotas"], all_types, existing, problems
    )
    users = _users(data, all_workspaces, environ, problems)
    keys = _access_keys(data, existing.users | declared["users"], existing, environ, problems)
    images = _images(data, problems)
    market = _market(data, problems)

    if problems.items:
        return None, problems.items
    return ClusterDeclaration(
        instance_types=tuple(types.values()),
        pools=tuple(pools.values()),
        nodes=tuple(nodes.values()),
        quotas=tuple(quotas),
        workspaces=tuple(workspaces.values()),
        users=tuple(users.values()),
        access_keys=tuple(keys.values()),
        images=tuple(images.values()),
        market=market,
    ), []


def _instance_types(data: Mapping, problems: Problems) -> dict[str, InstanceTypeDecl]:
    allowed = (
        "resource_type",
        "vcpus",
        "memory_gib",
        "gpu",
        "gpu_model",
        "price_per_hour",
        "public_capacity",
        "spot_enabled",
    )
    out = {}
    for name, path, body in _entries(data, "instance_types", problems):
        t = _Table(body, path, problems, allowed)
        if not TYPE_NAME.match(name):
            problems.add(path, "a name holds only letters, digits, '.', '-' and '_' (≤ 64)")
        resource_type = t.text("resource_type", required=True, choices=RESOURCE_TYPES)
        cpu = t.scaled("vcpus", factor=1000, unit="millicores", required=True, positive=True)
        memory = t.scaled("memory_gib", factor=1024, unit="MiB", required=True, positive=True)
        gpu = t.whole("gpu", maximum=MAX_NODE_GPUS)
        gpu_model = t.text("gpu_model", max_length=64)
        if gpu and not gpu_model and t.ok:
            problems.add(t.at("gpu_model"), "is required when gpu > 0")
        price = t.money("price_per_hour", required=True)
        capacity = t.whole("public_capacity")
        spot = t.flag("spot_enabled", default=True)
        if t.ok:
            out[name] = InstanceTypeDecl(
                name, resource_type, cpu, memory, gpu, gpu_model, price, capacity, spot
            )
    return out


def _pools(
    data: Mapping,
    types: Mapping[str, InstanceTypeDecl],
    declared_types: set[str],
    existing: ClusterState,
    problems: Problems,
) -> tuple[dict[str, PoolDecl], dict[str, NodeDecl], set[str]]:
    """The pools, their nodes, and the pools with a node group that has problems."""
    pools: dict[str, PoolDecl] = {}
    incomplete: set[str] = set()
    nodes: dict[str, NodeDecl] = {}
    where: dict[str, str] = {}  # node name → the path that declared it first
    for name, path, body in _entries(data, "pools", problems):
        t = _Table(body, path, problems, ("kind", "resource_type", "nodes"))
        if not SLUG.match(name):
            problems.add(path, "a pool name holds only letters, digits, '-' and '_' (≤ 64)")
        kind = t.text("kind", required=True, choices=POOL_KINDS)
        resource_type = t.text("resource_type", required=True, choices=RESOURCE_TYPES)
        groups = t.raw.get("nodes", [])
        if not isinstance(groups, list):
            problems.add(t.at("nodes"), "must be a list of tables ([[pools.<name>.nodes]])")
            groups = []
        if not t.ok:
            continue
        pools[name] = PoolDecl(name, kind, resource_type)
        for i, group in enumerate(groups):
            before = len(problems)
            for node, node_path in _node_group(
                group,
                path_of("pools", name, "nodes", i),
                pools[name],
                types,
                declared_types,
                problems,
            ):
                if node.name in where:
                    problems.add(
                        node_path, f"node {node.name!r} is already declared at {where[node.name]}"
                    )
                    continue
                where[node.name] = node_path
                nodes[node.name] = node
                reshaped = node_reshape_problem(existing, node)
                if reshaped:
                    problems.add(node_path, reshaped)
            if len(nodes) > MAX_NODES:
                problems.add(
                    path_of("pools", name, "nodes", i),
                    f"more than {MAX_NODES} nodes in the file",
                )
                return pools, {}, incomplete | {name}
            if len(problems) > before:
                incomplete.add(name)
    return pools, nodes, incomplete


def _node_group(
    raw: Any,
    path: str,
    pool: PoolDecl,
    types: Mapping[str, InstanceTypeDecl],
    declared_types: set[str],
    problems: Problems,
) -> list[tuple[NodeDecl, str]]:
    """One `[[pools.<p>.nodes]]` entry: a `name`, or `count` nodes named prefix + index."""
    allowed = (
        "name",
        "prefix",
        "count",
        "start",
        "instance_type",
        "vcpus",
        "memory_gib",
        "gpu",
        "gpu_model",
    )
    t = _Table(raw, path, problems, allowed)
    single = t.text("name", max_length=128)
    prefix = t.text("prefix", max_length=120)
    count = t.whole("count", default=0, minimum=1, maximum=MAX_NODES)
    start = t.whole("start", default=0)
    if single and ("prefix" in t.raw or "count" in t.raw):
        problems.add(path, "give either name, or prefix and count, not both")
    elif not single and not ("prefix" in t.raw and "count" in t.raw):
        problems.add(path, "give a name, or a prefix and a count")

    type_name = t.text("instance_type", max_length=64)
    shape_keys = [k for k in ("vcpus", "memory_gib", "gpu", "gpu_model") if k in t.raw]
    shape: NodeDecl | None = None
    if type_name and shape_keys:
        problems.add(
            path, f"give either instance_type or a shape ({', '.join(shape_keys)}), not both"
        )
    elif type_name:
        itype = types.get(type_name)
        if itype is None and type_name in declared_types:
            pass  # the instance type's own problems are listed
        elif itype is None:
            problems.add(t.at("instance_type"), f"unknown instance type {type_name!r}")
        elif itype.resource_type != pool.resource_type:
            problems.add(
                t.at("instance_type"),
                f"{type_name} is {itype.resource_type}, but "
                f"pool {pool.name!r} is {pool.resource_type}",
            )
        else:
            shape = NodeDecl(
                "", pool.name, type_name, itype.cpu, itype.memory, itype.gpu, itype.gpu_model
            )
    else:
        cpu = t.scaled("vcpus", factor=1000, unit="millicores", required=True, positive=True)
        memory = t.scaled("memory_gib", factor=1024, unit="MiB", required=True, positive=True)
        gpu = t.whole("gpu", maximum=MAX_NODE_GPUS)
        gpu_model = t.text("gpu_model", max_length=64)
        if gpu and not gpu_model and t.ok:
            problems.add(t.at("gpu_model"), "is required when gpu > 0")
        shape = NodeDecl("", pool.name, None, cpu, memory, gpu, gpu_model)
    if not t.ok or shape is None:
        return []

    names = [single] if single else [f"{prefix}{start + i}" for i in range(count)]
    out = []
    for node_name in names:
        if not NODE_NAME.match(node_name):
            problems.add(
                t.at("name" if single else "prefix"),
                f"{node_name!r} is not a valid "
                "node name (letters, digits, '.', '-' and '_', ≤ 128)",
            )
            return []
        node_path = path if single else f"{path} (node {node_name})"
        out.append(
            (
                NodeDecl(
                    node_name,
                    pool.name,
                    shape.instance_type,
                    shape.cpu,
                    shape.memory,
                    shape.gpu,
                    shape.gpu_model,
                ),
                node_path,
            )
        )
    return out


def node_reshape_problem(existing: ClusterState, node: NodeDecl) -> str | None:
    """A node with pods on it keeps its pool and none of its cores, memory or GPUs: its
    pods would hold more than it has, or stand in a pool they were not placed in. It is
    drained first, as before it is deleted."""
    before = existing.nodes.get(node.name)
    if before is None or node.name not in existing.busy:
        return None
    if node.pool != before.pool:
        change = f"move it from pool {before.pool!r} to {node.pool!r}"
    elif any(node.resources.get(r) < before.resources.get(r) for r in RESOURCE_KEYS):
        change = "give it less"
    else:
        return None
    return (
        f"node {node.name!r} has pods on it (Pending or Running): drain it first (the Nodes "
        f"admin's Drain action moves its jobs off), then {change}"
    )


def _check_pools_keep_their_contents(
    pools: Mapping[str, PoolDecl],
    nodes: Mapping[str, NodeDecl],
    quotas: set[str],
    types: Mapping[str, InstanceTypeDecl],
    existing: ClusterState,
    problems: Problems,
) -> None:
    """A pool the file changes must still suit the quotas and nodes it already holds."""
    for name, pool in pools.items():
        before = existing.pools.get(name)
        if before is None or before == pool:
            continue
        for q in existing.quotas.values():
            if q.pool == name and q.name not in quotas:
                if q.resource_type != pool.resource_type:
                    problems.add(
                        path_of("pools", name, "resource_type"),
                        f"existing quota {q.name!r} is {q.resource_type}",
                    )
                if pool.kind != "dedicated":
                    problems.add(
                        path_of("pools", name, "kind"),
                        f"existing quota {q.name!r} needs a dedicated pool",
                    )
        for node in existing.nodes.values():
            itype = types.get(node.instance_type or "")
            if node.name in nodes or node.pool != name:
                continue
            if itype and itype.resource_type != pool.resource_type:
                problems.add(
                    path_of("pools", name, "resource_type"),
                    f"existing node {node.name!r} is {itype.resource_type}",
                )


def _workspaces(data: Mapping, problems: Problems) -> dict[str, WorkspaceDecl]:
    out = {}
    for name, path, body in _entries(data, "workspaces", problems):
        t = _Table(body, path, problems, ("display_name", "description"))
        if not SLUG.match(name):
            problems.add(path, "a workspace name holds only letters, digits, '-' and '_' (≤ 64)")
        display_name = t.text("display_name", max_length=128)
        description = t.text("description", max_length=2000)
        if t.ok:
            out[name] = WorkspaceDecl(name, display_name, description)
    return out


@dataclass
class _RawQuota:
    name: str
    path: str
    parent: str | None
    pool: str | None
    resource_type: str | None
    min: Resources
    queue_strategy: str
    workspaces: tuple[str, ...]


def _quotas(
    data: Mapping,
    pools: Mapping[str, PoolDecl],
    declared_pools: set[str],
    touched_pools: set[str],
    unknown_capacity: set[str],
    nodes: Mapping[str, NodeDecl],
    workspaces: frozenset[str] | set[str],
    existing: ClusterState,
    problems: Problems,
) -> list[QuotaDecl]:
    raw: dict[str, _RawQuota] = {}
    for name, path, body in _entries(data, "quotas", problems):
        t = _Table(
            body,
            path,
            problems,
            ("parent", "pool", "resource_type", "min", "queue_strategy", "workspaces"),
        )
        if not SLUG.match(name):
            problems.add(path, "a quota name holds only letters, digits, '-' and '_' (≤ 64)")
        parent = t.text("parent", max_length=64) or None
        pool = t.text("pool", max_length=64) or None
        resource_type = t.text("resource_type", choices=RESOURCE_TYPES) or None
        m = _Table(t.table("min"), t.at("min"), problems, ("gpu", "cpu", "memory_gib"))
        minimum = Resources(
            cpu=m.scaled("cpu", factor=1000, unit="millicores"),
            memory=m.scaled("memory_gib", factor=1024, unit="MiB"),
            gpu=m.whole("gpu"),
        )
        strategy = t.text("queue_strategy", default="StrictFIFO", choices=QUEUE_STRATEGIES)
        names = t.texts("workspaces")
        for i, ws in enumerate(names):
            if ws not in workspaces:
                problems.add(path_of("quotas", name, "workspaces", i), f"unknown workspace {ws!r}")
        if parent is None and pool is None and "pool" not in t.raw:
            problems.add(t.at("pool"), "is required for a root quota (one without a parent)")
        if parent == name:
            problems.add(t.at("parent"), "a quota cannot be its own parent")
            parent = None
        raw[name] = _RawQuota(
            name, path, parent, pool, resource_type, minimum, strategy, tuple(names)
        )
    return _quota_tree(
        raw, pools, declared_pools, touched_pools, unknown_capacity, nodes, existing, problems
    )


def _quota_tree(
    raw: dict[str, _RawQuota],
    pools: Mapping[str, PoolDecl],
    declared_pools: set[str],
    touched_pools: set[str],
    unknown_capacity: set[str],
    nodes: Mapping[str, NodeDecl],
    existing: ClusterState,
    problems: Problems,
) -> list[QuotaDecl]:
    """Resolve parents and pools, then check the tree the apply would leave."""
    parents = {name: q.parent for name, q in existing.quotas.items()}
    parents.update({name: q.parent for name, q in raw.items()})
    broken: set[str] = set()  # quotas whose parent chain is unknown or cyclic

    for name, q in raw.items():
        if q.parent is not None and q.parent not in parents:
            problems.add(f"{q.path}.parent", f"unknown quota {q.parent!r}")
            broken.add(name)
    reported: set[frozenset[str]] = set()
    for name in raw:
        chain = [name]
        node = parents.get(name)
        while node is not None and node in parents and node not in chain:
            chain.append(node)
            node = parents[node]
        if node is not None and node in chain:
            cycle = chain[chain.index(node) :]
            broken.update(cycle)
            if frozenset(cycle) not in reported:
                reported.add(frozenset(cycle))
                shown = " → ".join([*cycle, node])
                problems.add(
                    f"{raw[min(c for c in cycle if c in raw)].path}.parent",
                    f"the parents form a cycle: {shown}",
                )

    def pool_of(name: str, seen: frozenset[str] = frozenset()) -> str | None:
        q = raw.get(name)
        if q is None:
            return existing.quotas[name].pool if name in existing.quotas else None
        if q.pool is not None or q.parent is None or name in seen:
            return q.pool
        return pool_of(q.parent, seen | {name})

    resolved: dict[str, QuotaDecl] = {}
    for name, q in raw.items():
        pool_name = pool_of(name)
        pool = pools.get(pool_name) if pool_name else None
        where = "pool" if q.pool is not None else "parent"
        if pool_name and pool is None and pool_name not in declared_pools:
            if q.pool is not None:  # said once, where the pool is named, not at each child
                problems.add(f"{q.path}.pool", f"unknown pool {pool_name!r}")
            continue
        if pool is None:
            continue  # reported above: no pool, or an unknown or cyclic parent
        if pool.kind != "dedicated":
            problems.add(
                f"{q.path}.{where}",
                f"pool {pool.name!r} is {pool.kind}; quotas live in dedicated pools",
            )
        if q.resource_type is not None and q.resource_type != pool.resource_type:
            problems.add(
                f"{q.path}.resource_type",
                f"{q.resource_type} differs from pool {pool.name!r}, which is {pool.resource_type}",
            )
        parent_pool = pool_of(q.parent) if q.parent and name not in broken else None
        if q.pool is not None and parent_pool is not None and parent_pool != q.pool:
            problems.add(
                f"{q.path}.pool",
                f"must be the parent's pool {parent_pool!r} (leave it out to inherit it)",
            )
        resolved[name] = QuotaDecl(
            name, q.parent, pool.name, pool.resource_type, q.min, q.queue_strategy, q.workspaces
        )

    tree = {**existing.quotas, **resolved}
    _check_children_fit(tree, raw, broken, problems)
    _check_roots_fit(tree, raw, pools, touched_pools, unknown_capacity, nodes, broken, problems)
    return [resolved[name] for name in _parents_first(resolved)]


def _check_children_fit(
    tree: Mapping[str, QuotaDecl],
    raw: Mapping[str, _RawQuota],
    broken: set[str],
    problems: Problems,
) -> None:
    """Per resource, the children's min together may not exceed their parent's min."""
    children: dict[str, list[QuotaDecl]] = {}
    for q in tree.values():
        if q.parent is not None and q.name not in broken and q.parent in tree:
            children.setdefault(q.parent, []).append(q)
    for parent_name, kids in children.items():
        parent = tree[parent_name]
        in_file = [k.name for k in kids if k.name in raw]
        if parent_name not in raw and not in_file:
            continue  # nothing this file declares is involved
        for resource, key in RESOURCE_KEYS.items():
            total = sum(k.min.get(resource) for k in kids)
            if total <= parent.min.get(resource):
                continue
            parts = ", ".join(
                f"{k.name} {resource_text(resource, k.min.get(resource))}" for k in kids
            )
            if parent_name in raw:
                problems.add(
                    f"{raw[parent_name].path}.min.{key}",
                    f"the children's min adds up to {resource_text(resource, total)} "
                    f"({parts}), more than this quota's "
                    f"{resource_text(resource, parent.min.get(resource))}",
                )
            else:
                problems.add(
                    f"{raw[in_file[0]].path}.min.{key}",
                    f"the children of {parent_name!r} need "
                    f"{resource_text(resource, total)} ({parts}), more than its "
                    f"{resource_text(resource, parent.min.get(resource))}",
                )


def pools_fit_problems(state: ClusterState, pool_names: Iterable[str]) -> list[str]:
    """The cluster file's rule that a pool's root quotas together fit its nodes, on `state`
    (the database with an edit made: a node deleted or reshaped), for the pools named."""
    problems = Problems()
    touched = set(pool_names)
    _check_roots_fit(state.quotas, {}, state.pools, touched, set(), state.nodes, set(), problems)
    return problems.items


def _check_roots_fit(
    tree: Mapping[str, QuotaDecl],
    raw: Mapping[str, _RawQuota],
    pools: Mapping[str, PoolDecl],
    touched_pools: set[str],
    unknown_capacity: set[str],
    nodes: Mapping[str, NodeDecl],
    broken: set[str],
    problems: Problems,
) -> None:
    """Per pool and resource, the root quotas' min together must fit the pool's nodes."""
    capacity: dict[str, Resources] = {}
    for node in nodes.values():
        capacity[node.pool] = capacity.get(node.pool, Resources()) + node.resources
    roots: dict[str, list[QuotaDecl]] = {}
    for q in tree.values():
        if q.parent is None and q.name not in broken:
            roots.setdefault(q.pool, []).append(q)
    for pool_name, pool_roots in roots.items():
        if pool_name not in pools:
            continue
        in_file = [q.name for q in pool_roots if q.name in raw]
        if pool_name in unknown_capacity or (not in_file and pool_name not in touched_pools):
            continue  # its node problems are listed, or nothing this file declares is involved
        path = f"{raw[in_file[0]].path}.min" if in_file else path_of("pools", pool_name, "nodes")
        held = capacity.get(pool_name, Resources())
        for resource, key in RESOURCE_KEYS.items():
            total = sum(q.min.get(resource) for q in pool_roots)
            if total <= held.get(resource):
                continue
            parts = ", ".join(
                f"{q.name} {resource_text(resource, q.min.get(resource))}" for q in pool_roots
            )
            problems.add(
                f"{path}.{key}" if in_file else path,
                f"the root quotas of pool {pool_name!r} guarantee "
                f"{resource_text(resource, total)} ({parts}), but its nodes hold "
                f"{resource_text(resource, held.get(resource))}",
            )


def _parents_first(quotas: Mapping[str, QuotaDecl]) -> list[str]:
    order: list[str] = []

    def visit(name: str, depth: int = 0) -> None:
        if name in order or depth > len(quotas):
            return
        parent = quotas[name].parent
        if parent in quotas:
            visit(parent, depth + 1)
        order.append(name)

    for name in quotas:
        visit(name)
    return order


def _users(
    data: Mapping,
    workspaces: frozenset[str] | set[str],
    environ: Mapping[str, str],
    problems: Problems,
) -> dict[str, UserDecl]:
    allowed = ("email", "password", "password_env", "is_staff", "is_superuser", "memberships")
    out = {}
    for name, path, body in _entries(data, "users", problems):
        t = _Table(body, path, problems, allowed)
        if not USERNAME.match(name):
            problems.add(path, "a username holds only letters, digits and @.+-_ (≤ 150)")
        email = t.text("email", max_length=254)
        if email and "@" not in email:
            problems.add(t.at("email"), f"{email!r} is not an e-mail address")
        password = _secret(t, "password", environ, required=False)
        if password is not None:
            for message in _password_problems(password, name):
                problems.add(
                    t.at("password_env" if "password_env" in t.raw else "password"), message
                )
        superuser = t.flag("is_superuser", default=False)
        staff = t.flag("is_staff", default=superuser)
        memberships = []
        for ws, role in t.table("memberships").items():
            at = path_of("users", name, "memberships", ws)
            if ws not in workspaces:
                problems.add(at, f"unknown workspace {ws!r}")
            elif role not in ROLES:
                problems.add(at, f"must be one of {', '.join(ROLES)}, not {role!r}")
            else:
                memberships.append((ws, role))
        if t.ok:
            out[name] = UserDecl(name, email, password, staff, superuser, tuple(memberships))
    return out


def _password_problems(password: str, username: str) -> list[str]:
    """The site's password validators (settings.AUTH_PASSWORD_VALIDATORS)."""
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    try:
        validate_password(password)
    except ValidationError as exc:
        return list(exc.messages)
    return []


def _secret(t: _Table, key: str, environ: Mapping[str, str], *, required: bool) -> str | None:
    """`key = "…"` or `key_env = "VAR"`; None when neither is given (and not required)."""
    env_key = f"{key}_env"
    if key in t.raw and env_key in t.raw:
        t.problems.add(t.path, f"give either {key} or {env_key}, not both")
        return None
    if env_key in t.raw:
        var = t.text(env_key, max_length=200)
        if var and var not in environ:
            t.problems.add(t.at(env_key), f"environment variable {var} is not set")
            return None
        return environ.get(var) if var else None
    if key in t.raw:
        value = t.text(key, max_length=200)
        if isinstance(t.raw[key], str) and not value:
            t.problems.add(t.at(key), "must not be empty")
        return value or None
    if required:
        t.problems.add(t.at(key), f"is required (or {env_key})")
    return None


def _access_keys(
    data: Mapping,
    users: frozenset[str] | set[str],
    existing: ClusterState,
    environ: Mapping[str, str],
    problems: Problems,
) -> dict[str, AccessKeyDecl]:
    allowed = ("user", "secret", "secret_env", "description", "enabled")
    out = {}
    for key_id, path, body in _entries(data, "access_keys", problems):
        t = _Table(body, path, problems, allowed)
        if not KEY_ID.match(key_id):
            problems.add(path, "an AccessKey id is 8 to 64 letters and digits")
        user = t.text("user", required=True, max_length=150)
        if user and user not in users:
            problems.add(t.at("user"), f"unknown user {user!r}")
        owner = existing.access_keys.get(key_id)
        if user and owner is not None and owner != user:
            problems.add(
                t.at("user"),
                f"the key belongs to {owner!r}; a key never changes "
                "owner (delete it in the admin first)",
            )
        secret = _secret(t, "secret", environ, required=True)
        if secret is not None and (
            len(secret) < 16 or not secret.isprintable() or any(c.isspace() for c in secret)
        ):
            problems.add(
                t.at("secret_env" if "secret_env" in t.raw else "secret"),
                "must be at least 16 printable characters without spaces",
            )
        description = t.text("description", max_length=200)
        enabled = t.flag("enabled", default=True)
        if t.ok and secret is not None:
            out[key_id] = AccessKeyDecl(key_id, user, secret, description, enabled)
    return out


def _images(data: Mapping, problems: Problems) -> dict[str, ImageDecl]:
    """`[images.<name>]`: a `uri` (what a job's image field takes) and a `description`. The
    name is the image's identity: a new `uri` under the same name replaces the suggestion."""
    out = {}
    where: dict[str, str] = {}  # uri → the path that declared it first
    for name, path, body in _entries(data, "images", problems):
        t = _Table(body, path, problems, ("uri", "description"))
        if not TYPE_NAME.match(name):
            problems.add(path, "an image name holds only letters, digits, '.', '-' and '_' (≤ 64)")
        uri = t.text("uri", required=True, max_length=512)
        if uri == t.raw.get("uri") and not IMAGE_URI.fullmatch(uri):
            problems.add(
                t.at("uri"),
                "must be printable ASCII without spaces" if uri else "must not be empty",
            )
        elif uri in where:
            problems.add(t.at("uri"), f"{uri!r} is already declared at {where[uri]}")
        description = t.text("description", max_length=200)
        if t.ok:
            where[uri] = path
            out[name] = ImageDecl(name, uri, description)
    return out


def _market(data: Mapping, problems: Problems) -> MarketDecl | None:
    """`[market]`: the spot market's parameters, each in its open or closed range; a key
    left out takes the market's default."""
    if "market" not in data:
        return None
    allowed = ("floor_ratio", "smoothing", "volatility", "sensitivity", "average_window_minutes")
    t = _Table(data["market"], "market", problems, allowed)
    d = MARKET_DEFAULTS
    floor = t.bounded(
        "floor_ratio",
        default=d.floor_ratio,
        low=0,
        high=1,
        closed_high=False,
        strings=True,
        places=3,
    )
    smoothing = t.bounded("smoothing", default=Decimal(str(d.smoothing)), low=0, high=1)
    volatility = t.bounded(
        "volatility",
        default=Decimal(str(d.volatility)),
        low=0,
        high=1,
        closed_low=True,
        closed_high=False,
    )
    sensitivity = t.bounded("sensitivity", default=Decimal(str(d.sensitivity)), low=0)
    seconds = 60 * t.bounded(
        "average_window_minutes", low=0, default=Decimal(str(d.average_window_seconds)) / 60
    )
    if seconds < 1:  # the model's floor: a shorter window averages nothing
        problems.add(t.at("average_window_minutes"), "must be at least one second (1/60 minute)")
    if not t.ok:
        return None
    return MarketDecl(
        floor, float(smoothing), float(volatility), float(sensitivity), float(seconds)
    )
