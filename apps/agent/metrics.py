"""Pod metrics, the pure part: what a sample of a pod is, how counters become rates, how
NVML's readings become a pod's GPU figures, and how a series is averaged per time step.

No Django and no kernel files: the agent's sampler (apps/agent/sampler.py) reads the kernel
into `Reading`s and stores `figures(previous, current)`; GetJobMetrics and the job page read
the stored samples back through `downsample`. The clock is always an argument.

A figure the host cannot give (no GPU, no network namespace, no CPU accounting) is None:
absent, never zero. A counter that went backwards (an interface re-created, a counter
reset) gives no rate for that interval rather than a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "METRIC_TYPES",
    "Figures",
    "GpuReading",
    "MetricType",
    "Reading",
    "downsample",
    "figures",
    "gpu_figures",
    "io_totals",
    "metric_text",
    "metric_type",
    "net_dev_totals",
    "parse_time_step",
    "rate",
]


@dataclass(frozen=True, slots=True)
class MetricType:
    """One of GetJobMetrics' MetricTypes: the sample field that holds it and its unit."""

    name: str  # as the API names it
    field: str  # PodMetricSample's column
    unit: str  # as docs/api.md gives it


# PAI's names (the SDK's GetJobMetricsRequest.metric_type), in the order the page shows them.
METRIC_TYPES: tuple[MetricType, ...] = (
    MetricType("CpuCoreUsage", "cpu_cores", "cores"),
    MetricType("MemoryUsage", "memory_bytes", "bytes"),
    MetricType("GpuCoreUsage", "gpu_percent", "percent"),
    MetricType("GpuMemoryUsage", "gpu_memory_bytes", "bytes"),
    MetricType("NetworkInputRate", "net_rx_rate", "bytes/s"),
    MetricType("NetworkOutputRate", "net_tx_rate", "bytes/s"),
    MetricType("DiskReadRate", "disk_read_rate", "bytes/s"),
    MetricType("DiskWriteRate", "disk_write_rate", "bytes/s"),
)
_BY_NAME = {m.name.lower(): m for m in METRIC_TYPES}


def metric_type(name: str) -> MetricType | None:
    """The metric type called `name` (any case), or None."""
    return _BY_NAME.get(name.strip().lower())


@dataclass(frozen=True, slots=True)
class Reading:
    """What the kernel and NVML said of one pod at one moment. `at` is a monotonic clock in
    seconds (intervals only); the counters only grow while the pod lives; None: not
    available on this host (or for this pod)."""

    at: float
    cpu_usec: int | None = None  # CPU time used since the pod started
    memory_bytes: int | None = None  # in use now (working set)
    net_rx_bytes: int | None = None  # received by the pod's network namespace
    net_tx_bytes: int | None = None
    disk_read_bytes: int | None = None  # read from and written to storage
    disk_write_bytes: int | None = None
    gpu_percent: float | None = None  # now, over the pod's GPUs
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Figures:
    """One stored sample: levels at the moment, rates over the interval since the previous
    reading (None for the first reading of a pod, and across a counter reset)."""

    cpu_cores: float | None = None
    memory_bytes: int | None = None
    gpu_percent: float | None = None
    gpu_memory_bytes: int | None = None
    net_rx_rate: float | None = None
    net_tx_rate: float | None = None
    disk_read_rate: float | None = None
    disk_write_rate: float | None = None

    @property
    def empty(self) -> bool:
        return all(getattr(self, m.field) is None for m in METRIC_TYPES)


def rate(before: int | None, after: int | None, seconds: float) -> float | None:
    """Units per second of a counter read twice `seconds` apart; None when either reading is
    missing, no time passed, or the counter went backwards (it was reset: how much it
    counted before the reset is unknown)."""
    if before is None or after is None or seconds <= 0 or after < before:
        return None
    return (after - before) / seconds


def figures(previous: Reading | None, current: Reading) -> Figures:
    """The sample of `current`, its rates against `previous` (the pod's last reading)."""
    seconds = current.at - previous.at if previous is not None else 0.0
    before = previous or Reading(at=current.at)
    cpu = rate(before.cpu_usec, current.cpu_usec, seconds)
    return Figures(
        cpu_cores=None if cpu is None else cpu / 1e6,
        memory_bytes=current.memory_bytes,
        gpu_percent=current.gpu_percent,
        gpu_memory_bytes=current.gpu_memory_bytes,
        net_rx_rate=rate(before.net_rx_bytes, current.net_rx_bytes, seconds),
        net_tx_rate=rate(before.net_tx_bytes, current.net_tx_bytes, seconds),
        disk_read_rate=rate(before.disk_read_bytes, current.disk_read_bytes, seconds),
        disk_write_rate=rate(before.disk_write_bytes, current.disk_write_bytes, seconds),
    )


# --- GPUs: NVML's readings → a pod's figures ------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One device as NVML reports it: nvmlDeviceGetUtilizationRates(h).gpu (percent of the
    last sample period the device was busy) and nvmlDeviceGetMemoryInfo(h).used/.total."""

    index: int
    utilization_gpu: int
    memory_used: int
    memory_total: int


def gpu_indexes(gpu_ids: str) -> list[int]:
    """The pod's GPU indexes from its CUDA_VISIBLE_DEVICES text ("0,1"); [] for none. Text
    that is not a list of indexes gives [] too: no figure rather than another GPU's."""
    parts = [p.strip() for p in gpu_ids.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and p.isascii() for p in parts):
        return []
    return sorted({int(p) for p in parts})


def gpu_figures(
    devices: Mapping[int, GpuReading] | None, gpu_ids: str
) -> tuple[float | None, int | None]:
    """(GPU utilisation in percent, the mean over the pod's GPUs; GPU memory in use in
    bytes, summed over them) for a pod on `gpu_ids`. (None, None) for a pod without GPUs,
    on a host where NVML did not load (`devices` None), or when a GPU of the pod gave no
    reading: absent, never zero. A GPU shared by several pods gives each its whole figure
    (NVML reports the device)."""
    indexes = gpu_indexes(gpu_ids)
    if not indexes or devices is None or any(i not in devices for i in indexes):
        return None, None
    readings = [devices[i] for i in indexes]
    busy = sum(min(max(r.utilization_gpu, 0), 100) for r in readings) / len(readings)
    return float(busy), sum(max(r.memory_used, 0) for r in readings)


# --- kernel text → counters ---------------------------------------------------------------


def net_dev_totals(text: str) -> tuple[int, int] | None:
    """(received, transmitted) bytes summed over every interface of /proc/<pid>/net/dev's
    text (its loopback too: the pods of a job on one host talk over it); None when the text
    has no interface line."""
    rx = tx = 0
    found = False
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        fields = rest.split()
        if not colon or len(fields) < 9 or not name.strip():
            continue
        try:
            rx, tx = rx + int(fields[0]), tx + int(fields[8])
        except ValueError:
            continue
        found = True
    return (rx, tx) if found else None


def io_totals(texts: Iterable[str]) -> tuple[int, int] | None:
    """(read_bytes, write_bytes) summed over /proc/<pid>/io texts, one per live process of
    the pod (each counts its own I/O and its reaped children's); None with no readable one."""
    read = written = 0
    found = False
    for text in texts:
        values = {}
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if value.strip().isdigit():
                values[key.strip()] = int(value)
        if "read_bytes" in values and "write_bytes" in values:
            read, written = read + values["read_bytes"], written + values["write_bytes"]
            found = True
    return (read, written) if found else None


def monotonic_total(
    previous: tuple[int, int] | None, current: tuple[int, int] | None
) -> tuple[int, int] | None:
    """A sum over live processes dips for a moment when a process ends between two reads
    (its bytes move to its parent once reaped): keep the larger of each, so the dip gives a
    zero rate and the next reading goes on from the right total."""
    if current is None or previous is None:
        return current
    return max(previous[0], current[0]), max(previous[1], current[1])


def metric_text(unit: str, value: float) -> str:
    """A figure in `unit` as the console writes it: 1.25 (cores), 207 MiB, 1.2 MiB/s, 45%.
    Small figures keep two significant digits (0.0025 cores, 0.5%), so that the ticks of a
    chart of an idle pod do not all read 0.00."""
    if unit == "percent":
        return f"{value:.2g}%" if 0 < abs(value) < 10 else f"{value:.0f}%"
    if unit in ("bytes", "bytes/s"):
        size = float(value)
        for prefix in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(size) < 1024 or prefix == "TiB":
                break
            size /= 1024
        text = f"{size:.0f} {prefix}" if prefix == "B" or size >= 100 else f"{size:.1f} {prefix}"
        return text + ("/s" if unit == "bytes/s" else "")
    return f"{value:.2g}" if 0 < abs(value) < 0.01 else f"{value:.2f}"


# --- reading back: TimeStep and the average per step -----------------------------------------

_STEP = re.compile(r"([0-9]{1,9})([smhd]?)", re.ASCII)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time_step(text: str) -> int:
    """TimeStep as PAI writes it ("5m", "30s", "1h", "1d") or plain seconds ("300"), in
    seconds; ValueError otherwise (zero included)."""
    match = _STEP.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(text)
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise ValueError(text)
    return seconds


def downsample(
    points: Iterable[tuple[float, float]], *, start: float, step: float
) -> list[tuple[float, float]]:
    """The average of the points in each step [start + k·step, start + (k+1)·step), at the
    step's start; steps without a point are left out (absent, not zero). `points` are
    (epoch seconds, value), in any order; those before `start` are ignored."""
    if step <= 0:
        raise ValueError("step must be positive")
    sums: dict[int, tuple[float, int]] = {}
    for at, value in points:
        if at < start:
            continue
        k = int((at - start) // step)
        total, count = sums.get(k, (0.0, 0))
        sums[k] = (total + value, count + 1)
    return [(start + k * step, total / count) for k, (total, count) in sorted(sums.items())]
