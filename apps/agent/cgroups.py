"""Per-pod cgroups: memory, process-count and CPU limits that the kernel enforces.

Why cgroups and not rlimits: RLIMIT_AS caps each process's address space (so a pod of ten
processes gets ten times its memory, and a JIT that reserves address space dies for no
reason), RLIMIT_NPROC counts per uid across the whole host, and nothing per process caps
CPU. A cgroup accounts for the whole pod, whatever it forks, and tells us afterwards
*why* it died (an OOM kill, fork refused at pids.max), which the exit code alone cannot.

Layout. A pod's group is `<root>/<name>` in the single cgroup v2 hierarchy, or in each
cgroup v1 hierarchy that carries one of memory, pids, cpu and cpuacct (cpu and cpuacct are
often co-mounted as "cpu,cpuacct"; a hierarchy is joined once, whatever its name). The
name is the caller's ("paiweb/<agent>/<pod id>"), so several agents, or a test run with
its own prefix, never touch each other's groups.

Security. Every file here is created by the kernel root-owned and 0644, and the group
directories root-owned and 0755. Nothing is chowned or delegated: a pod runs as an
unprivileged uid and must be able neither to raise its own limits nor to move itself out
(to escape, it would have to write the common ancestor's cgroup.procs, which is root's).
Limits are written when the group is created, before any process joins, so no pod ever
runs unlimited for a moment.

Processes join through `PodCgroup.join_argv()`, a tiny /bin/sh launcher that writes its
own pid into every cgroup.procs and then execs the rest of the argv, so the pod's first
instruction already runs inside the group (no race between fork and a join written by the
parent, and no preexec_fn in a threaded agent).

This module is pure Python with no Django imports: the node agent, its tests and one-off
tools use it alike.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CPU_PERIOD_US",
    "CgroupError",
    "CgroupHost",
    "Limits",
    "PodCgroup",
    "detect",
    "detect_reason",
    "sweep",
]

DEFAULT_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000  # the CFS default period: 100 ms
_MIN_QUOTA_US = 1_000  # the kernel refuses a CFS quota below 1 ms
# The controllers a pod is limited by. memory and pids are required (without them a pod
# can take the host down); cpu is best effort (a pod without it is merely greedy).
_REQUIRED = ("memory", "pids")
_V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
_V2_CONTROLLERS = ("memory", "pids", "cpu")
_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@-]*")

OOM_KILLED = "OOMKilled"
TOO_MANY_PROCESSES = "TooManyProcesses"

# Bounds for the loops that wait for the kernel: killing is asynchronous (a process in
# uninterruptible sleep dies when it wakes) and rmdir answers EBUSY until the last task has
# left the group, which lags a SIGKILL by a few milliseconds.
_KILL_SECONDS = 5.0
_RMDIR_ATTEMPTS = 50
_RETRY_SLEEP = 0.02


class CgroupError(OSError):
    """A group could not be created, limited, joined or removed. An OSError, so callers that
    already treat a failed launch as an OSError need no new except clause."""


@dataclass(frozen=True)
class Limits:
    """What one pod may use. 0 means no limit for each field.

    memory_bytes: RAM the whole pod may hold (page cache included, as the kernel accounts
    it); swap is capped too, so a pod cannot "escape" into swap and thrash the host.
    pids: processes and threads, together (the kernel counts tasks).
    cpu_millicores: 1000 = one CPU's worth of time per period, enforced by the CFS quota;
    also sets the pod's weight under contention in the same proportion.
    """

    memory_bytes: int = 0
    pids: int = 0
    cpu_millicores: int = 0

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "pids", "cpu_millicores"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Limits.{name} must be an int >= 0, not {value!r}")

    # -- the values written, shared by both versions so the tests can check the arithmetic --

    def cfs_quota_us(self) -> int:
        """The CFS quota per CPU_PERIOD_US, or -1 for none. At least 1 ms (the kernel's
        minimum), so a tiny request is throttled hard rather than refused."""
        if not self.cpu_millicores:
            return -1
        return max(_MIN_QUOTA_US, self.cpu_millicores * CPU_PERIOD_US // 1000)

    def cpu_shares(self) -> int:
        """v1 cpu.shares: 1024 is one CPU (the kernel default); the kernel minimum is 2."""
        if not self.cpu_millicores:
            return 1024
        return max(2, self.cpu_millicores * 1024 // 1000)

    def tcp_buffer_bytes(self, host_tcp_pressure_bytes: int | None) -> int:
        """v1 memory.kmem.tcp.limit_in_bytes: the most the pod's TCP sockets may hold in
        kernel buffers. cgroup v1 charges them to no limit unless one is written, and they
        count against the host's TCP memory (net.ipv4.tcp_mem), which every socket of the
        host shares: past it, PostgreSQL's and Redis's connections could not send either.
        At most the pod's memory, and at most a quarter of the host's pressure threshold
        (tcp_mem's second figure), so one pod alone never reaches it."""
        caps = [c for c in (self.memory_bytes, (host_tcp_pressure_bytes or 0) // 4) if c > 0]
        return min(caps) if caps else 0

    def cpu_weight(self) -> int:
        """v2 cpu.weight: 100 (the kernel default) is one CPU, the same scale as v1's 1024
        shares, clamped to the kernel's 1..10000."""
        if not self.cpu_millicores:
            return 100
        return min(10_000, max(1, self.cpu_millicores // 10))


# --- low-level file access --------------------------------------------------------------


def _write(path: Path, value: str) -> None:
    """One write(2) per value: the kernel parses each write on its own, so a buffered writer
    that splits or joins writes would change its meaning. O_CREAT only matters for a fake
    tree in tests; the kernel's files already exist."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise CgroupError(exc.errno, f"cannot open {path}: {exc.strerror}") from exc
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise CgroupError(exc.errno, f"cannot write {value!r} to {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _read(path: Path) -> str | None:
    """The file's text, or None when it does not exist (an older kernel, or a group already
    removed)."""
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ENODEV, errno.ENOENT):
            return None
        raise


def _read_int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    text = text.strip().split()[0] if text.strip() else ""
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed file ("oom_kill 3\\nmax 0\\n": memory.events, pids.events,
    memory.oom_control, cpu.stat) as a dict; missing file → {}."""
    out: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def _writable(path: Path) -> bool:
    """Writable by us, and not on a read-only mount (a container's /sys/fs/cgroup often is
    a read-only bind mount; checking the mount flags says so before any write fails)."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return os.access(path, os.W_OK)


def _split_name(name: str) -> list[str]:
    """The path components of a group name. A safe alphabet and no leading dot, so a name
    can neither leave the hierarchy ("..", "/abs") nor look like a kernel file."""
    parts = name.strip("/").split("/")
    if any(not _NAME_PART.fullmatch(p) for p in parts):
        raise ValueError(f"bad cgroup name {name!r}: use [A-Za-z0-9_.:@-] parts separated by /")
    return parts


def _procs(path: Path) -> list[int]:
    text = _read(path)
    return [int(line) for line in (text or "").split()] if text else []


def _subgroups(directory: Path) -> list[Path]:
    """Child groups, deepest first (the order rmdir needs). A pod cannot create any (its
    directory is root's), but a leftover tree might have them."""
    try:
        children = [p for p in directory.iterdir() if p.is_dir() and not p.is_symlink()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[Path] = []
    for child in children:
        out.extend(_subgroups(child))
        out.append(child)
    return out


# --- detection --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    version: int
    hierarchies: dict[str, Path]  # controller → directory under which groups are made
    reason: str = ""


def _v1_hierarchies(root: Path) -> dict[str, Path]:
    """controller → hierarchy directory, for each v1 hierarchy under root. Looks at the
    directory names ("memory", "cpu,cpuacct") rather than /proc/self/mountinfo so a fake
    tree in a test is read the same way; a symlink such as cpu → cpu,cpuacct resolves to
    the same hierarchy and is counted once by its callers."""
    found: dict[str, Path] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.is_dir() or not (entry / "cgroup.procs").exists():
            continue
        for controller in entry.name.split(","):
            if controller in _V1_CONTROLLERS and controller not in found:
                found[controller] = entry
    # A symlink (cpu -> cpu,cpuacct) and its target are one hierarchy: compare real paths.
    return {c: Path(os.path.realpath(p)) for c, p in found.items()}


def _probe(root: Path) -> _Probe:
    root = Path(root)
    if not root.is_dir():
        return _Probe(0, {}, f"{root} does not exist")
    controllers_file = root / "cgroup.controllers"
    if controllers_file.exists():
        available = set((_read(controllers_file) or "").split())
        missing = [c for c in _REQUIRED if c not in available]
        if missing:
            return _Probe(
                2,
                {},
                f"cgroup v2 at {root} lacks the {' and '.join(missing)} "
                f"controller{'s' if len(missing) > 1 else ''} "
                f"(cgroup.controllers: "
                f"{' '.join(sorted(available)) or 'none'})",
            )
        if not _writable(root) or not _writable(root / "cgroup.subtree_control"):
            return _Probe(
                2, {}, f"cgroup v2 at {root} is not writable (read-only mount, or not root)"
            )
        enabled = set((_read(root / "cgroup.subtree_control") or "").replace("+", "").split())
        procs = _procs(root / "cgroup.procs")
        if (root / "cgroup.type").exists() and not set(_REQUIRED) <= enabled and procs:
            # Not the real root (only it lacks cgroup.type) and it holds processes: the
            # kernel's "no internal processes" rule refuses to enable controllers for its
            # children, the usual state inside a container with its own cgroup namespace.
            return _Probe(
                2,
                {},
                f"cgroup v2 at {root} holds processes and has no "
                f"memory/pids in cgroup.subtree_control; move them into "
                f"a child group first",
            )
        hierarchies = {c: root for c in _V2_CONTROLLERS if c in available}
        return _Probe(2, hierarchies)
    found = _v1_hierarchies(root)
    missing = [c for c in _REQUIRED if c not in found]
    if missing:
        return _Probe(
            1,
            {},
            f"no cgroup v1 hierarchy for {' and '.join(missing)} under "
            f"{root}, and no cgroup v2 there either",
        )
    unwritable = [c for c in _REQUIRED if not _writable(found[c])]
    if unwritable:
        return _Probe(
            1,
            {},
            f"cgroup v1 {' and '.join(unwritable)} under {root} not "
            f"writable (read-only mount, or not root)",
        )
    usable = {c: p for c, p in found.items() if c in _REQUIRED or _writable(p)}
    return _Probe(1, usable)


def detect(root: Path = DEFAULT_ROOT) -> CgroupHost | None:
    """The host's cgroups if memory and pids can be limited here, else None (and
    `detect_reason` says why). cpu and cpuacct are used when present but not required."""
    probe = _probe(Path(root))
    if probe.reason:
        return None
    return CgroupHost(version=probe.version, root=Path(root), hierarchies=probe.hierarchies)


def detect_reason(root: Path = DEFAULT_ROOT) -> str:
    """Why `detect(root)` returns None, in words for an operator; "" when it does not."""
    return _probe(Path(root)).reason


# --- the host and its groups ------------------------------------------------------------


@dataclass
class CgroupHost:
    """The cgroup hierarchies of this host that pods are limited through.

    version: 1 or 2. hierarchies: controller → the directory groups are created under
    (for v2 every controller maps to the one root)."""

    version: int
    root: Path
    hierarchies: dict[str, Path]

    @property
    def has_cpu(self) -> bool:
        """Whether cpu limits are applied (the cpu controller is optional)."""
        return "cpu" in self.hierarchies

    def directories(self) -> tuple[Path, ...]:
        """Each distinct hierarchy directory once (v1 "cpu,cpuacct" or v2's single root).
        cpuacct is listed only when it is a hierarchy of its own."""
        seen: list[Path] = []
        for controller in _V1_CONTROLLERS:
            path = self.hierarchies.get(controller)
            if path is not None and path not in seen:
                seen.append(path)
        return tuple(seen)

    def group(self, name: str) -> PodCgroup:
        """The PodCgroup for `name` without creating or limiting anything (for sweep and
        for create's bookkeeping)."""
        parts = _split_name(name)
        dirs = tuple(base.joinpath(*parts) for base in self.directories())
        return PodCgroup(host=self, name="/".join(parts), dirs=dirs)

    def create(self, name: str, limits: Limits) -> PodCgroup:
        """Make (or reuse) the group `name` in every hierarchy and write its limits.

        Idempotent: a leftover group of that name (an agent crash between create and
        remove) is reused after its limits are rewritten; its event counters are taken as
        the baseline, so an old OOM kill is not reported as this pod's. Missing parent
        groups are created (and remembered, so remove() can take them away again); on v2
        the parents get +memory +pids +cpu in cgroup.subtree_control, without which the
        child would have no memory.max to write.

        A parent removed by another pod's remove() between our mkdirs (ENOENT) is simply
        recreated: a few attempts, then CgroupError. On any failure, what was made is
        removed again."""
        group = self.group(name)
        parts = group.name.split("/")
        created: list[Path] = []
        try:
            for attempt in range(5):
                try:
                    self._make_dirs(parts, created)
                    break
                except OSError as exc:
                    if exc.errno != errno.ENOENT or attempt == 4:
                        raise
                    time.sleep(_RETRY_SLEEP)
            group.created = tuple(created)
            if self.version == 2:
                self._limit_v2(group.dirs[0], limits)
            else:
                self._limit_v1(group, limits)
        except BaseException:
            group.created = tuple(created)
            try:
                group.remove()
            except OSError:
                pass
            raise
        group.limits = limits
        group._baseline = group._counters()
        return group

    def _make_dirs(self, parts: list[str], created: list[Path]) -> None:
        """mkdir each level in each hierarchy, appending what it made to `created`."""
        for base in self.directories():
            current = base
            if self.version == 2:
                self._enable_v2(current)
            for depth, part in enumerate(parts):
                current = current / part
                try:
                    current.mkdir(mode=0o755)
                    if current not in created:
                        created.append(current)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise CgroupError(
                        exc.errno, f"cannot create {current}: {exc.strerror}"
                    ) from exc
                if self.version == 2 and depth < len(parts) - 1:
                    self._enable_v2(current)

    def _enable_v2(self, parent: Path) -> None:
        """Delegate memory, pids (and cpu if present) to the children of `parent`. Only
        the missing ones are written, so an already-configured root is never touched."""
        control = parent / "cgroup.subtree_control"
        enabled = set((_read(control) or "").replace("+", "").split())
        wanted = [c for c in _V2_CONTROLLERS if c in self.hierarchies and c not in enabled]
        if wanted:
            _write(control, " ".join(f"+{c}" for c in wanted))

    def _limit_v2(self, directory: Path, limits: Limits) -> None:
        memory = str(limits.memory_bytes) if limits.memory_bytes else "max"
        _write(directory / "memory.max", memory)
        if (directory / "memory.swap.max").exists():  # absent without swap accounting
            _write(directory / "memory.swap.max", "0" if limits.memory_bytes else "max")
        _write(directory / "pids.max", str(limits.pids) if limits.pids else "max")
        if self.has_cpu:
            quota = limits.cfs_quota_us()
            _write(directory / "cpu.max", f"{quota if quota > 0 else 'max'} {CPU_PERIOD_US}")
            _write(directory / "cpu.weight", str(limits.cpu_weight()))

    def _limit_v1(self, group: PodCgroup, limits: Limits) -> None:
        memory = group._dir("memory")
        _set_v1_memory(memory, limits.memory_bytes)
        # Fresh counters for a reused group (only v1 lets them be reset).
        for counter in (
            "memory.failcnt",
            "memory.max_usage_in_bytes",
            "memory.memsw.failcnt",
            "memory.memsw.max_usage_in_bytes",
        ):
            if (memory / counter).exists():
                try:
                    _write(memory / counter, "0")
                except CgroupError:
                    pass
        tcp = memory / "memory.kmem.tcp.limit_in_bytes"
        tcp_bytes = limits.tcp_buffer_bytes(host_tcp_pressure_bytes())
        if tcp_bytes and tcp.exists():
            _write(tcp, str(tcp_bytes))
        _write(group._dir("pids") / "pids.max", str(limits.pids) if limits.pids else "max")
        if self.has_cpu:
            cpu = group._dir("cpu")
            _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(limits.cfs_quota_us()))
            _write(cpu / "cpu.shares", str(limits.cpu_shares()))


def host_tcp_pressure_bytes(path: Path = Path("/proc/sys/net/ipv4/tcp_mem")) -> int | None:
    """Where the kernel starts to press every TCP socket of the host to shrink its buffers
    (tcp_mem's second figure, in pages), in bytes; None where it cannot be read. On cgroup
    v2 a pod's socket buffers are charged to its memory.max: this is for v1."""
    try:
        text = _read(path)
        return int(text.split()[1]) * os.sysconf("SC_PAGE_SIZE") if text else None
    except (IndexError, ValueError, OSError):
        return None


def _set_v1_memory(directory: Path, memory_bytes: int) -> None:
    """memory.limit_in_bytes, and memory.memsw.limit_in_bytes (RAM + swap) to the same
    value when the kernel accounts swap, so the pod cannot spill into swap. The kernel
    insists memory <= memsw at every moment, so the order depends on the direction: lower
    memory first, raise memsw first. Rather than read and compare, try one order and fall
    back to the other on EINVAL."""
    value = str(memory_bytes) if memory_bytes else "-1"
    limit, memsw = directory / "memory.limit_in_bytes", directory / "memory.memsw.limit_in_bytes"
    if not memsw.exists():
        _write(limit, value)
        return
    try:
        _write(limit, value)
        _write(memsw, value)
    except CgroupError as exc:
        if exc.errno != errno.EINVAL:
            raise
        _write(memsw, value)
        _write(limit, value)


@dataclass
class PodCgroup:
    """One pod's group, in every hierarchy of its host."""

    host: CgroupHost
    name: str
    dirs: tuple[Path, ...]  # the group's directory in each hierarchy (host.directories order)
    created: tuple[Path, ...] = ()  # the directories create() made, remove() takes away
    limits: Limits | None = None
    _baseline: dict[str, int] = field(default_factory=dict, repr=False)

    def _dir(self, controller: str) -> Path:
        """The group's directory in the hierarchy of `controller`."""
        base = self.host.hierarchies[controller]
        return base.joinpath(*self.name.split("/"))

    @property
    def procs_files(self) -> tuple[Path, ...]:
        """Every cgroup.procs a process must be written to: one per v1 hierarchy (memory,
        pids, cpu, and cpuacct only if separate), or the single v2 one."""
        return tuple(d / "cgroup.procs" for d in self.dirs)

    def join_argv(self) -> list[str]:
        """An argv prefix that puts the rest of the argv into this group.

        /bin/sh writes its own pid ($$) into each cgroup.procs, then execs the command,
        which keeps the pid and so the membership; everything it forks inherits it. If a
        write fails (the group is gone, or we are not root) it exits 125 with a message on
        stderr rather than run the pod unlimited."""
        script = (
            'for f; do [ "$f" = -- ] && break; '
            'echo $$ > "$f" || { echo "cgroup-join: cannot join $f" >&2; exit 125; }; '
            'shift; done; shift; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "cgroup-join", *map(str, self.procs_files), "--"]

    # -- what happened --

    def _counters(self) -> dict[str, int]:
        """The event counters outcome() compares against their values at create()."""
        if self.host.version == 2:
            d = self.dirs[0]
            memory, pids = _keyed(d / "memory.events"), _keyed(d / "pids.events")
            return {"oom_kill": memory.get("oom_kill", 0), "pids_max": pids.get("max", 0)}
        memory = self._dir("memory")
        oom = _keyed(memory / "memory.oom_control")
        counters = {
            "pids_max": _keyed(self._dir("pids") / "pids.events").get("max", 0),
            "failcnt": _read_int(memory / "memory.failcnt") or 0,
        }
        if "oom_kill" in oom:
            counters["oom_kill"] = oom["oom_kill"]
        return counters

    def outcome(self, exit_code: int | None = None) -> str:
        """Why the kernel stopped the pod: "OOMKilled", "TooManyProcesses" or "".

        OOMKilled: the kernel OOM-killed a process of the group since create(). v2: the
        oom_kill count in memory.events. v1: the oom_kill count in memory.oom_control
        (kernel 4.13+); on an older kernel, which lacks it, memory.failcnt > 0 (the limit
        was hit) *and* the pod died of SIGKILL (exit_code 137, or -9 as Popen reports it) -
        hitting the limit alone only means the kernel reclaimed, so without exit_code that
        fallback never concludes OOMKilled.
        TooManyProcesses: a fork or clone was refused at pids.max ("max" in pids.events).
        A memory kill wins when both happened: it is what ended the pod, while a refused
        fork is often survived."""
        now, base = self._counters(), self._baseline
        if "oom_kill" in now:
            if now["oom_kill"] > base.get("oom_kill", 0):
                return OOM_KILLED
        elif now.get("failcnt", 0) > 0 and exit_code in (137, -signal.SIGKILL):
            return OOM_KILLED
        if now.get("pids_max", 0) > base.get("pids_max", 0):
            return TOO_MANY_PROCESSES
        return ""

    def usage(self) -> dict:
        """What the pod uses now, for display: memory_current, memory_peak (bytes; the
        peak since create on v1, or the group's lifetime on v2 - None if the kernel has
        no memory.peak), pids_current, pids_peak (None before kernel 6.1), and cpu_usec
        (CPU time used, None without a cpu accounting controller)."""
        if self.host.version == 2:
            d = self.dirs[0]
            cpu = _keyed(d / "cpu.stat").get("usage_usec")
            return {
                "memory_current": _read_int(d / "memory.current"),
                "memory_peak": _read_int(d / "memory.peak"),
                "pids_current": _read_int(d / "pids.current"),
                "pids_peak": _read_int(d / "pids.peak"),
                "cpu_usec": cpu,
            }
        memory, pids = self._dir("memory"), self._dir("pids")
        cpu_ns = None
        if "cpuacct" in self.host.hierarchies:
            cpu_ns = _read_int(self._dir("cpuacct") / "cpuacct.usage")
        return {
            "memory_current": _read_int(memory / "memory.usage_in_bytes"),
            "memory_peak": _read_int(memory / "memory.max_usage_in_bytes"),
            "pids_current": _read_int(pids / "pids.current"),
            "pids_peak": _read_int(pids / "pids.peak"),
            "cpu_usec": None if cpu_ns is None else cpu_ns // 1000,
        }

    def memory_in_use(self) -> int | None:
        """The pod's memory in use now, in bytes: its working set, as kubelet and `docker
        stats` count it (the group's usage less its inactive file cache, which the kernel
        drops before it would OOM-kill); None where the memory controller says nothing."""
        if self.host.version == 2:
            d = self.dirs[0]
            usage, inactive = _read_int(d / "memory.current"), "inactive_file"
        else:
            d = self._dir("memory")
            usage, inactive = _read_int(d / "memory.usage_in_bytes"), "total_inactive_file"
        if usage is None:
            return None
        return max(usage - _keyed(d / "memory.stat").get(inactive, 0), 0)

    def pids(self) -> list[int]:
        """The live processes of the group (the pids hierarchy's, or v2's, cgroup.procs,
        sub-groups included), as seen from our pid namespace."""
        directory = self.dirs[0] if self.host.version == 2 else self._dir("pids")
        return self._pids_under([directory])

    @staticmethod
    def _pids_under(directories: Iterable[Path]) -> list[int]:
        out: set[int] = set()
        for directory in directories:
            for d in [directory, *_subgroups(directory)]:
                out.update(_procs(d / "cgroup.procs"))
        return sorted(out)

    # -- ending --

    def kill_all(self) -> None:
        """SIGKILL every process of the group until none is left (at most a few seconds:
        a process can fork between our read and our kill, so one pass is not enough).

        v2 kernels since 5.14 kill the whole group atomically through cgroup.kill; the
        loop still runs to wait for the group to empty. Processes in any of the v1
        hierarchies are killed, should a join have stopped half-way."""
        if self.host.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
            try:
                _write(self.dirs[0] / "cgroup.kill", "1")
            except CgroupError:
                pass
        deadline = time.monotonic() + _KILL_SECONDS
        me = os.getpid()
        while True:
            pids = [p for p in self._pids_under(self.dirs) if p != me]
            if not pids or time.monotonic() > deadline:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(_RETRY_SLEEP)

    def remove(self) -> None:
        """Kill what is left, then rmdir the group in every hierarchy, and the parent groups
        create() made if nothing else lives in them any more. A group already gone is fine;
        one that stays busy after the bounded retries raises CgroupError."""
        self.kill_all()
        failures: list[str] = []
        for directory in self.dirs:
            for d in [*_subgroups(directory), directory]:
                why = _rmdir(d, attempts=_RMDIR_ATTEMPTS)
                if why:
                    failures.append(why)
        # Parents last, deepest first; one attempt: EBUSY here means a sibling pod's group.
        own = set(self.dirs)
        for d in sorted(
            (p for p in self.created if p not in own), key=lambda p: len(p.parts), reverse=True
        ):
            _rmdir(d, attempts=1)
        if failures:
            raise CgroupError(errno.EBUSY, "; ".join(failures))


def _rmdir(directory: Path, *, attempts: int) -> str:
    """rmdir with retries on EBUSY (the kernel lags the exit of the last task); returns
    "" on success or when the directory is already gone, else why it failed."""
    for attempt in range(attempts):
        try:
            os.rmdir(directory)
            return ""
        except FileNotFoundError:
            return ""
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EAGAIN) or attempt == attempts - 1:
                return f"cannot remove {directory}: {exc.strerror}"
            time.sleep(_RETRY_SLEEP)
    return ""


def sweep(host: CgroupHost, prefix: str, keep: set[str]) -> int:
    """Remove the groups directly under `prefix` whose name is not in `keep` - leftovers of
    pods an agent lost track of when it crashed - killing any process still in them.
    `keep` holds full names ("paiweb/node1/pod-1"); a bare child name ("pod-1") is accepted
    too. Looks in every hierarchy, since a crash can leave a group in only some of them.
    Returns how many groups were removed. The prefix itself is left in place."""
    parts = _split_name(prefix)
    prefix = "/".join(parts)
    children: set[str] = set()
    for base in host.directories():
        directory = base.joinpath(*parts)
        try:
            children.update(
                p.name for p in directory.iterdir() if p.is_dir() and not p.is_symlink()
            )
        except (FileNotFoundError, NotADirectoryError):
            continue
    removed = 0
    for child in sorted(children):
        full = f"{prefix}/{child}"
        if full in keep or child in keep or not _NAME_PART.fullmatch(child):
            continue
        host.group(full).remove()
        removed += 1
    return removed
