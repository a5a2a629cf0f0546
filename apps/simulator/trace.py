"""Reading traces: the jobs to replay and the nodes to replay them on. Pure: paths in, values out.

Two job formats, told apart by their header:

- the openb pod list of Alibaba's 2023 GPU trace (`name,cpu_milli,memory_mib,num_gpu,
  gpu_milli,...,qos,...,creation_time,deletion_time,scheduled_time`): one single-pod job per row;
- the simulator's own CSV (`name,submit_time,...`, docs/simulator.md): gangs, quotas, idle
  modes and priorities, CPU in cores and memory in GiB as the cluster file writes them.

And three node formats: the openb node list (`sn,cpu_milli,memory_mib,gpu,model`), the
node list of the 2026 spot-GPU trace (`gpu_model,gpu_capacity_num,cpu_num,node_name`; it
records no memory, so memory never binds there) and the simulator's own
(`name,cpu,memory_gib,gpu[,model][,count]`).

A pod may ask for a fraction of one GPU (openb's `gpu_milli` below 1000, or `gpu = 0.5` in
the own format): the engine places it on one GPU it shares with other such pods (or, with GPU
sharing off, gives it a whole GPU). `gpu_milli` keeps what it asked for, which is what
allocation ratios are measured in.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from apps.core.limits import MAX_NODE_GPUS, MAX_NODES, MAX_PODS_PER_ROLE


class TraceError(ValueError):
    """A trace or node file that cannot be read; the message names the file and the row."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: `pods` alike pods of the given shape, all started together.

    `duration` is the seconds of work it does once started (None: it runs to the end of the
    replay). `gpu` is whole GPUs per pod, a fraction rounded up (what the pod holds when
    GPUs are not shared), `gpu_milli` per pod as asked. `recorded_delay` is the queueing
    delay the trace itself recorded, if any.
    """

    name: str
    submit: float
    duration: float | None
    gpu: int
    gpu_milli: int
    cpu: int  # millicores per pod
    memory: int  # MiB per pod
    pods: int = 1
    qos: str = ""
    quota: str | None = None
    idle_mode: str | None = None
    priority: int = 1
    recorded_delay: float | None = None

    @property
    def fractional(self) -> bool:
        """Asks for part of one GPU."""
        return self.gpu * 1000 != self.gpu_milli

    @property
    def share(self) -> int:
        """The milli-GPUs of one GPU a fractional pod asks for; 0 for whole GPUs."""
        return self.gpu_milli if self.fractional else 0


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu: int  # millicores
    memory: int  # MiB
    gpu: int
    model: str = ""


_OPENB_JOB = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time"}
_OWN_JOB = {"name", "submit_time"}
_OPENB_NODE = {"sn", "cpu_milli", "memory_mib", "gpu"}
_SPOT_NODE = {"gpu_model", "gpu_capacity_num", "cpu_num", "node_name"}
_OWN_NODE = {"name", "cpu", "memory_gib", "gpu"}
_UNRECORDED_MEMORY = 1 << 30  # MiB: more than any pod asks for
IDLE_MODES = ("off", "acceptable", "only_idle")


def read_jobs(path: str | Path, *, name: str | None = None) -> list[TraceJob]:
    """The jobs of a trace file in either format, in submission order (stable). Errors
    name the file `name` when given (an upload kept under a path of the server's)."""
    label = name or path
    rows = _rows(path, label)
    if _job_format(rows.fieldnames, label) == "openb":
        jobs = [_openb_job(row, _where(label, rows)) for row in rows]
    else:
        jobs = [_own_job(row, _where(label, rows)) for row in rows]
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise TraceError(f"{label}: job names repeat")
    return sorted(jobs, key=lambda j: j.submit)


def check_jobs_header(head: bytes, label: str) -> None:
    """TraceError unless `head`, the start of a file, begins with the header of a job trace
    in either format: what `read_jobs` would refuse at once, told before the file is kept."""
    first = head.split(b"\n", 1)[0].removesuffix(b"\r")
    try:
        text = first.decode("utf-8-sig")  # as `_Rows` reads it
    except UnicodeDecodeError as e:
        raise _unreadable(label, e) from None
    try:
        fieldnames = next(csv.reader([text]), [])
    except csv.Error as e:
        raise _unreadable(label, e) from None
    _job_format(fieldnames, label)


def _job_format(fieldnames: Iterable[str] | None, label: str | Path) -> str:
    """Which format a job trace's header is: "openb" or "own"."""
    header = set(fieldnames or ())
    if _OPENB_JOB <= header:
        return "openb"
    if _OWN_JOB <= header:
        return "own"
    raise TraceError(
        f"{label}: not a job trace (expected the openb pod list's columns or "
        f"name,submit_time,...; got {','.join(fieldnames or ())})"
    )


def read_nodes(path: str | Path) -> list[TraceNode]:
    """The nodes of a node file in either format, in file order."""
    rows = _rows(path)
    header = set(rows.fieldnames or ())
    nodes: list[TraceNode] = []
    if _OPENB_NODE <= header:
        for row in rows:
            where = _where(path, rows)
            _node(
                nodes,
                where,
                TraceNode(
                    name=row["sn"],
                    cpu=_int(row, "cpu_milli", where),
                    memory=_int(row, "memory_mib", where),
                    gpu=_int(row, "gpu", where),
                    model=row.get("model") or "",
                ),
            )
    elif _SPOT_NODE <= header:
        for row in rows:
            where = _where(path, rows)
            _node(
                nodes,
                where,
                TraceNode(
                    name=f"node-{row['node_name']}",
                    cpu=_scaled(row, "cpu_num", 1000, where),
                    memory=_UNRECORDED_MEMORY,
                    gpu=_int(row, "gpu_capacity_num", where),
                    model=row.get("gpu_model") or "",
                ),
            )
    elif _OWN_NODE <= header:
        for row in rows:
            where = _where(path, rows)
            count = _int(row, "count", where) if row.get("count") else 1
            for i in range(count):
                name = row["name"] if count == 1 else f"{row['name']}{i}"
                _node(
                    nodes,
                    where,
                    TraceNode(
                        name=name,
                        cpu=_scaled(row, "cpu", 1000, where),
                        memory=_scaled(row, "memory_gib", 1024, where),
                        gpu=_int(row, "gpu", where),
                        model=row.get("model") or "",
                    ),
                )
    else:
        raise TraceError(
            f"{path}: not a node list (expected sn,cpu_milli,memory_mib,gpu or "
            f"name,cpu,memory_gib,gpu; got {','.join(rows.fieldnames or ())})"
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def _node(nodes: list[TraceNode], where: str, node: TraceNode) -> None:
    """Add a node, within the engine's limits (a typo should not fill the memory)."""
    if node.gpu > MAX_NODE_GPUS:
        raise TraceError(f"{where}: at most {MAX_NODE_GPUS} GPUs on one node, got {node.gpu}")
    if len(nodes) >= MAX_NODES:
        raise TraceError(f"{where}: more than {MAX_NODES} nodes")
    nodes.append(node)


def _openb_job(row: dict[str, str], where: str) -> TraceJob:
    num_gpu = _int(row, "num_gpu", where)
    per_gpu = _int(row, "gpu_milli", where)
    if per_gpu > 1000:
        raise TraceError(
            f"{where}: gpu_milli is thousandths of one GPU, at most 1000, got {row['gpu_milli']!r}"
        )
    created = float(_int(row, "creation_time", where))
    scheduled = _optional(row, "scheduled_time", where)
    deleted = _optional(row, "deletion_time", where)
    started = created if scheduled is None else scheduled
    # openb writes a multi-GPU pod's gpu_milli as 1000: the share applies per GPU
    milli = num_gpu * per_gpu if num_gpu <= 1 else num_gpu * 1000
    return TraceJob(
        name=row["name"],
        submit=created,
        duration=None if deleted is None else max(0.0, deleted - started),
        gpu=num_gpu,
        gpu_milli=milli,
        cpu=_int(row, "cpu_milli", where),
        memory=_int(row, "memory_mib", where),
        qos=row.get("qos") or "",
        recorded_delay=None if scheduled is None else scheduled - created,
    )


def _own_job(row: dict[str, str], where: str) -> TraceJob:
    gpu = _decimal(row, "gpu", where) if row.get("gpu") else Decimal(0)
    milli = int(gpu * 1000)
    if milli != gpu * 1000 or gpu < 0 or (gpu > 1 and gpu != int(gpu)):
        raise TraceError(f"{where}: gpu must be whole, or a fraction below 1 in thousandths")
    idle_mode = row.get("idle_mode") or None
    if idle_mode is not None and idle_mode not in IDLE_MODES:
        raise TraceError(f"{where}: idle_mode must be one of {', '.join(IDLE_MODES)}")
    duration = _optional(row, "duration", where)
    pods = _int(row, "pods", where) if row.get("pods") else 1
    if not 1 <= pods <= MAX_PODS_PER_ROLE:
        raise TraceError(f"{where}: pods must be from 1 to {MAX_PODS_PER_ROLE}")
    return TraceJob(
        name=row["name"],
        submit=float(_decimal(row, "submit_time", where)),
        duration=duration,
        gpu=math.ceil(gpu),
        gpu_milli=milli,
        cpu=_scaled(row, "cpu", 1000, where) if row.get("cpu") else 0,
        memory=_scaled(row, "memory_gib", 1024, where) if row.get("memory_gib") else 0,
        pods=pods,
        qos=row.get("qos") or "",
        quota=row.get("quota") or None,
        idle_mode=idle_mode,
        priority=_int(row, "priority", where) if row.get("priority") else 1,
    )


class _Rows:
    """csv.DictReader over a file, closed when read to the end, that knows its line."""

    def __init__(self, path: str | Path, label: str | Path) -> None:
        try:
            # utf-8-sig: a byte order mark (a CSV saved by a spreadsheet) is not a column's
            self.file = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115
        except OSError as e:
            raise TraceError(f"{label}: {e.strerror}") from e
        self.label = label
        self.reader = csv.DictReader(self.file)
        try:
            self.fieldnames = self.reader.fieldnames
        except (UnicodeDecodeError, csv.Error) as e:
            self.file.close()
            raise _unreadable(label, e) from None

    @property
    def line(self) -> int:
        return self.reader.line_num

    def __iter__(self) -> Iterator[dict[str, str]]:
        with self.file:
            try:
                yield from self.reader
            except (UnicodeDecodeError, csv.Error) as e:
                raise _unreadable(self.label, e) from None


def _unreadable(path: str | Path, e: UnicodeDecodeError | csv.Error) -> TraceError:
    """A file that is not UTF-8 CSV: which file, and what is wrong with it."""
    if isinstance(e, UnicodeDecodeError):
        return TraceError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x})")
    return TraceError(f"{path}: not CSV ({e})")


def _rows(path: str | Path, label: str | Path | None = None) -> _Rows:
    return _Rows(path, path if label is None else label)


def _where(path: str | Path, rows: _Rows) -> str:
    return f"{path}:{rows.line}"


def _decimal(row: dict[str, str], key: str, where: str) -> Decimal:
    text = (row.get(key) or "").strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise TraceError(f"{where}: {key} must be a number, got {text!r}") from None
    if not value.is_finite():
        raise TraceError(f"{where}: {key} must be a number, got {text!r}")
    return value


def _int(row: dict[str, str], key: str, where: str) -> int:
    value = _decimal(row, key, where)
    if value != int(value) or value < 0:
        raise TraceError(f"{where}: {key} must be a whole number ≥ 0, got {row.get(key)!r}")
    return int(value)


def _scaled(row: dict[str, str], key: str, unit: int, where: str) -> int:
    value = _decimal(row, key, where)
    if value < 0:
        raise TraceError(f"{where}: {key} must be ≥ 0")
    return int(value * unit)


def _optional(row: dict[str, str], key: str, where: str) -> float | None:
    return float(_decimal(row, key, where)) if (row.get(key) or "").strip() else None


def requested_milli(jobs: Iterable[TraceJob]) -> int:
    """Milli-GPUs the jobs ask for, all pods counted."""
    return sum(j.gpu_milli * j.pods for j in jobs)
