"""Reading a pod's figures from the kernel and NVML, for the agent's metrics (the pure part,
and what the figures mean: apps/agent/metrics.py).

Pods are hostile, so only what the kernel itself reports is read, as root, from outside the
sandbox: the pod's cgroup (CPU time, memory in use), /proc/<pid>/io of the cgroup's
processes (storage I/O), /proc/<pid>/net/dev of a process of the pod that is inside the job's
network namespace (the namespace's counters), and NVML. Nothing a pod can write is read: a
pod changes its own figures only by using what they measure, and its cgroup and namespace
are its own (its job's), so it cannot reach another pod's.

No Django: the supervisor calls `pod_reading` for each pod once per POD_METRICS_SECONDS.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from types import ModuleType

from apps.agent import metrics, netns
from apps.agent.cgroups import PodCgroup

logger = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_READ = 1 << 16  # /proc/<pid>/net/dev of a namespace with a few interfaces: ~1 KiB


def _read_at(dir_fd: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return os.read(fd, _MAX_READ).decode(errors="replace")
    finally:
        os.close(fd)


def _proc(pid: int) -> int | None:
    """/proc/<pid> opened: reads through it fail (ESRCH) once that process is gone, rather
    than read another process that took its pid."""
    try:
        return os.open(f"/proc/{int(pid)}", _DIR_FLAGS)
    except OSError:
        return None


def io_bytes(pids: list[int]) -> tuple[int, int] | None:
    """(read, written) bytes of storage I/O of these processes, each with its reaped
    children (the kernel's task I/O accounting, as iotop reads it); None if none could be
    read (no such accounting here, or no process left)."""
    texts = []
    for pid in pids:
        fd = _proc(pid)
        if fd is None:
            continue
        try:
            texts.append(_read_at(fd, "io"))
        except OSError:
            pass
        finally:
            os.close(fd)
    return metrics.io_totals(texts)


def netns_bytes(name: str, pids: list[int]) -> tuple[int, int] | None:
    """(received, transmitted) bytes of the named network namespace, read through a process
    of the pod that is in it (checked by the namespace's inode, through the same /proc
    directory the counters are read from); None when none is (or the namespace is gone)."""
    try:
        target = os.stat(netns.path(name))
    except OSError:
        return None
    for pid in pids:
        fd = _proc(pid)
        if fd is None:
            continue
        try:
            found = os.stat("ns/net", dir_fd=fd)
            if (found.st_ino, found.st_dev) != (target.st_ino, target.st_dev):
                continue
            return metrics.net_dev_totals(_read_at(fd, "net/dev"))
        except OSError:
            continue
        finally:
            os.close(fd)
    return None


class Gpus:
    """NVML (the nvidia-ml-py package), where it loads: each device's reading keyed by its
    minor number, the N of /dev/nvidiaN, which is what a pod's GPU indexes name (the sandbox
    gives a pod /dev/nvidia<index>). Where NVML does not load (no driver, no GPU), `read`
    gives None and the GPU figures are absent."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self.problem = ""
        self._nvml: ModuleType | None = None
        try:
            module = nvml or importlib.import_module("pynvml")
            module.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError…
            self.problem = f"NVML did not load: {exc}"
            return
        self._nvml = module

    @property
    def loaded(self) -> bool:
        return self._nvml is not None

    def read(self) -> dict[int, metrics.GpuReading] | None:
        nvml = self._nvml
        if nvml is None:
            return None
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception:
            logger.exception("NVML: cannot count the devices")
            return None
        devices = {}
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
                busy = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception:  # a device that cannot say (NotSupported, GPU lost): absent
                continue
            devices[minor] = metrics.GpuReading(
                index=minor,
                utilization_gpu=int(busy.gpu),
                memory_used=int(memory.used),
                memory_total=int(memory.total),
            )
        return devices


def pod_reading(
    *,
    at: float,
    cgroup: PodCgroup | None,
    netns_name: str,
    gpu_ids: str,
    devices: Mapping[int, metrics.GpuReading] | None,
    net_seen: dict[str, tuple[int, int]],
    previous: metrics.Reading | None = None,
) -> metrics.Reading:
    """One pod's reading now (`at`: the monotonic clock), after its `previous` one. `net_seen`
    caches each namespace's counters for this round: the pods of a job on this host share
    its namespace."""
    cpu_usec = memory = io = net = None
    if cgroup is not None:
        pids = cgroup.pids()
        cpu_usec = cgroup.usage()["cpu_usec"]
        memory = cgroup.memory_in_use()
        io = io_bytes(pids)
        if previous is not None and previous.disk_read_bytes is not None:
            before = (previous.disk_read_bytes, previous.disk_write_bytes or 0)
            io = metrics.monotonic_total(before, io)
        if netns_name:
            net = net_seen.get(netns_name) or netns_bytes(netns_name, pids)
            if net is not None:
                net_seen[netns_name] = net
    gpu_percent, gpu_memory = metrics.gpu_figures(devices, gpu_ids)
    return metrics.Reading(
        at=at,
        cpu_usec=cpu_usec,
        memory_bytes=memory,
        net_rx_bytes=None if net is None else net[0],
        net_tx_bytes=None if net is None else net[1],
        disk_read_bytes=None if io is None else io[0],
        disk_write_bytes=None if io is None else io[1],
        gpu_percent=gpu_percent,
        gpu_memory_bytes=gpu_memory,
    )
