"""Run one pod: a stranger's shell command as its own process tree, isolated from the host,
the platform and other jobs, with its output captured to a size-capped log file.

Pure Python, no Django: the agent builds a `PodSpec`, `start()` hands it to a shim of its
own (apps/agent/shim.py: a small process per pod that outlives the agent) and returns the
agent's `PodProcess` handle on it, which `PodProcess.adopt()` also gives a restarted agent.
The tests drive it directly.

Isolation (SANDBOX=strict, the default; docs/execution.md has the threat model). The agent
runs as root and builds, for each pod, this chain of processes, each exec'ing the next:

    cgroup-join (memory, pids, cpu limits)  →  nsenter --net (the job's network namespace)
      →  bwrap (mounts, pid/ipc/uts/cgroup namespaces, seccomp)  →  prlimit (file size, core)
      →  setpriv (the job's own uid/gid, no groups, no capabilities, no_new_privs)
      →  python (the pod's environment: `_env_argv`)  →  bash

bwrap shows the pod only what is bound in: the system (/usr, /etc minus its secrets, /opt,
/sys with only the pod's own cgroup) read-only, the Python environments, a fresh /dev and
/proc, size-capped /tmp and /dev/shm, and its own work, checkpoint and data directories.
Nothing of paiweb (its source, var/, the database, sockets, other jobs) exists in that
tree. SANDBOX=insecure runs pods with whatever of this the host can give, and says so.

Signals. bwrap's monitor leads the pod's process group, and a SIGTERM to it would kill bwrap
at once (and, by --die-with-parent, SIGKILL the pod with no grace). So stop() signals every
*descendant* of bwrap instead — the pod's own processes receive the SIGTERM and may clean
up — and escalates to SIGKILL on bwrap's group and the pod's cgroup. The pod's shell is
signalled last, once what it ran has exited (unless it traps SIGTERM): its exit ends the
sandbox. The shim does this, so a stop requested just before the agent went away still
escalates on time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from apps.agent import cgroups, netns, seccomp, shim
from apps.agent.shim import descendants, exit_code  # noqa: F401 (re-exported)
from apps.core.words import say

_BASE_DIR = Path(__file__).resolve().parents[2]

SANDBOX_MODES = ("strict", "insecure")
DATA_MOUNT = Path("/mnt/data")
COMMAND_PATH = "/run/paiweb/command"  # the user's command, as a script, in the sandbox
ENV_PATH = "/run/paiweb/env"  # the pod's environment, in the sandbox (see `_env_argv`)
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024
MIB = 1024 * 1024
SIGXFSZ_EXIT = 128 + signal.SIGXFSZ  # a write past RLIMIT_FSIZE
# Read-only from the host. /usr-merged systems have /bin, /lib… as symlinks into /usr.
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/sys")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Covered inside /etc: password hashes and private keys, even though the pod's uid could not
# read most of them anyway.
ETC_SECRET_FILES = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
)
ETC_SECRET_DIRS = (
    "/etc/ssl/private",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/postgresql",
    "/etc/redis",
    "/etc/rabbitmq",
    "/etc/paiweb",
    # services' environments: a unit's Environment= lines, EnvironmentFile=/etc/default/…
    # (SECRET_KEY, DATABASE_URL with its password), systemd's credentials
    "/etc/default",
    "/etc/sysconfig",
    "/etc/systemd",
    "/etc/credstore",
    "/etc/credstore.encrypted",
)
# The host's /sys is the host network namespace's view: these list the host's interfaces
# (and the links of every job's namespace, by name). A pod's own interfaces are its
# namespace's (`ip link`, getifaddrs), which the sysfs of the host does not show anyway.
SYS_NET_DIRS = ("/sys/class/net", "/sys/devices/virtual/net")
GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


class SandboxUnavailable(RuntimeError):
    """SANDBOX=strict, but this host cannot isolate pods (see `Isolation.missing`)."""


# --- what this host can give ---------------------------------------------------------------


@dataclass(frozen=True)
class Isolation:
    """What pods started on this host get. `missing` lists, as sentences, each protection
    this host cannot give; with SANDBOX=strict any of them means no pod runs here."""

    requested: str
    missing: tuple[str, ...]
    bwrap: str | None
    root: bool
    netns: bool
    cgroups: int | None  # cgroup version with memory, pids and cpu, or None
    seccomp: bool

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def can_run(self) -> bool:
        return self.complete or self.requested == "insecure"

    @property
    def mode(self) -> str:
        """ "strict" when every protection applies, else "insecure" (what a pod's row says)."""
        return "strict" if self.complete else "insecure"

    @property
    def detail(self) -> str:
        if self.complete:
            return say(
                "isolated: bubblewrap ({path}), own uid, no capabilities, seccomp, "
                "a network namespace per job, cgroup v{count} limits",
                path=self.bwrap,
                count=self.cgroups,
            )
        return "INSECURE: " + "; ".join(self.missing)


def _run_ok(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    why = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
    return done.returncode == 0, why


@functools.cache
def _bwrap_probe() -> tuple[str | None, str]:
    """Can bubblewrap build namespaces here? Cached: a host does not change its mind."""
    path = shutil.which("bwrap")
    if path is None:
        return None, "bubblewrap is not installed (apt-get install bubblewrap)"
    ok, why = _run_ok(
        [
            path,
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--unshare-pid",
            "--die-with-parent",
            "--new-session",
            "true",
        ]
    )
    return (path, "") if ok else (None, f"{path} cannot create namespaces here: {why}")


@functools.cache
def _netns_probe() -> str:
    if os.geteuid() != 0:
        return "network namespaces per job need the agent to run as root"
    return netns.probe()


@functools.cache
def cgroup_host() -> cgroups.CgroupHost | None:
    """This host's cgroup controllers (cached: a host does not change its mind)."""
    return cgroups.detect()


def isolation_status(requested: str = "strict") -> Isolation:
    """The isolation pods started on this host get, for SANDBOX=strict|insecure."""
    if requested not in SANDBOX_MODES:
        raise ValueError(f"SANDBOX: expected one of {SANDBOX_MODES}, got {requested!r}")
    missing = []
    bwrap, why = _bwrap_probe()
    if bwrap is None:
        missing.append(why)
    root = os.geteuid() == 0
    if not root:
        missing.append(
            "the agent does not run as root, so pods cannot get a uid of their own "
            "(they would run as the agent's user)"
        )
    for tool in ("setpriv", "nsenter", "prlimit"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (util-linux) is not installed")
    netns_why = _netns_probe()
    if netns_why:
        missing.append(netns_why)
    host = cgroup_host()
    if host is None:
        missing.append(
            f"no writable cgroup controllers for memory and pids ({cgroups.detect_reason()})"
        )
    has_seccomp = seccomp.pod_filter() is not None
    if not has_seccomp:
        missing.append("no seccomp filter for this CPU architecture")
    return Isolation(
        requested=requested,
        missing=tuple(missing),
        bwrap=bwrap,
        root=root,
        netns=not netns_why,
        cgroups=host.version if host else None,
        seccomp=has_seccomp,
    )


# --- what to run -------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSpec:
    """Everything needed to start one pod's process.

    Paths are host paths. In the sandbox, `writable` and `readable` appear at the same paths
    and `data_dir` at /mnt/data; nothing else of the host's directories but the system ones.
    """

    name: str
    command: str
    work_dir: Path
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    isolation: Isolation | None = None  # None: run bare (tests of the runner's plumbing)
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    # paiweb's own (its source tree, var/, the work root, the agent's state): covered where a
    # system directory the sandbox shows holds them (paiweb installed under /opt, say)
    hidden: tuple[Path, ...] = ()
    data_dir: Path | None = None
    uid: int = 0  # the pod's own uid and gid on the host (strict: never 0)
    netns: str = ""  # the named network namespace of the pod's job on this host
    cgroup: cgroups.PodCgroup | None = None
    memory_mib: int = 0  # RLIMIT_AS per process when there is no cgroup; 0 = no limit
    file_size_max: int = 0  # RLIMIT_FSIZE in bytes (a single file); 0 = no limit
    tmp_mib: int = 1024  # /tmp and /dev/shm sizes in the sandbox
    shm_mib: int = 512
    gpu_ids: str = ""
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES

    @property
    def sandboxed(self) -> bool:
        return self.isolation is not None and self.isolation.bwrap is not None

    @property
    def strict(self) -> bool:
        return self.isolation is not None and self.isolation.complete


def shell_argv(script: str) -> list[str]:
    """bash (else sh) running the script at `script`. Not a login shell: /etc/profile would
    reset PATH. The command is a file, never an argument: no argv limit applies to it."""
    bash = shutil.which("bash")
    return [bash, script] if bash else ["/bin/sh", script]


def _limits_argv(spec: PodSpec) -> list[str]:
    """Per-process limits: the file size cap (so no single write outruns the disk watchdog),
    no core dumps, and — only without a cgroup — an address-space cap for memory."""
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        return []
    limits = ["--core=0:0"]
    if spec.file_size_max > 0:
        limits.append(f"--fsize={spec.file_size_max}:{spec.file_size_max}")
    if spec.memory_mib > 0 and spec.cgroup is None:
        limits.append(f"--as={spec.memory_mib * MIB}")
    return [prlimit, *limits, "--"]


def _drop_argv(spec: PodSpec) -> list[str]:
    """Become the job's uid: no supplementary groups, no capabilities, no way back."""
    setpriv = shutil.which("setpriv")
    if not spec.uid or setpriv is None:
        return []
    return [
        setpriv,
        f"--reuid={spec.uid}",
        f"--regid={spec.uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def _system_binds() -> list[str]:
    argv: list[str] = []
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in SYSTEM_DIRS:
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in ETC_SECRET_FILES:
        if os.path.lexists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in ETC_SECRET_DIRS:
        if os.path.isdir(path) and not os.path.islink(path):
            argv += ["--tmpfs", path]
    for path in SYS_NET_DIRS:
        if os.path.isdir(path) and not os.path.islink(path):
            argv += ["--tmpfs", path]
    return argv


def _inside(path: str, parents: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def _covered(spec: PodSpec) -> list[str]:
    """Each of `spec.hidden` that a bound system directory shows, outermost first. The
    system binds show /opt or /usr/local whole, and an installation there would show a pod
    its database file, the installation secret and every other job's directory. One inside
    a site-packages directory (paiweb installed as a package) is left: the pod's Python
    needs the packages beside it. A link is followed: its target is what the system binds
    show (bwrap would follow it too, and refuse to cover a directory with a file)."""
    packages = [*site.getsitepackages(), site.getusersitepackages()]
    covered: list[str] = []
    for path in sorted(dict.fromkeys(os.path.realpath(p) for p in spec.hidden), key=len):
        if (
            _inside(path, SYSTEM_DIRS)
            and path not in SYSTEM_DIRS
            and not _inside(path, covered)
            and not _inside(path, packages)
            and os.path.lexists(path)
        ):
            covered.append(path)
    return covered


def _hidden_binds(covered: list[str]) -> list[str]:
    """A directory covered with an empty tmpfs, a file with /dev/null. Readable and writable
    paths inside are bound again above it (with the directories down to them)."""
    argv: list[str] = []
    for path in covered:
        if os.path.isdir(path):
            argv += ["--tmpfs", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    return argv


def _cgroup_binds(spec: PodSpec) -> list[str]:
    """Only the pod's own cgroup where the host's cgroup tree was (read-only): /sys shows
    every group of the host, and so every other job's pods by name with their memory, CPU
    and process counts. As a container runtime does it, the group's files are at the root
    of each hierarchy (memory.limit_in_bytes, memory.max, cpu.max …: the pod's limits)."""
    group = spec.cgroup
    if group is None or not _inside(str(group.host.root), ("/sys",)):
        return []
    root = str(group.host.root)
    if group.host.version == 2:
        return ["--ro-bind", str(group.dirs[0]), root]
    argv = ["--perms", "0755", "--tmpfs", root]
    for hierarchy, directory in zip(group.host.directories(), group.dirs, strict=True):
        argv += ["--ro-bind", str(directory), str(hierarchy)]
    return argv


def _identity_files(spec: PodSpec) -> dict[str, bytes]:
    """/etc/passwd and /etc/group with the pod's uid as user "pod" (tools that look up their
    own name — whoami, pip, getpass — work), no other account's details changed."""
    home = str(spec.work_dir)
    files = {}
    for path, line in (
        ("/etc/passwd", f"pod:x:{spec.uid}:{spec.uid}:pod:{home}:/bin/bash\n"),
        ("/etc/group", f"pod:x:{spec.uid}:\n"),
    ):
        try:
            with open(path, "rb") as source:
                base = source.read(1 << 20)
        except OSError:
            base = b""
        if base and not base.endswith(b"\n"):
            base += b"\n"
        files[path] = base + line.encode()
    return files


def _gpu_binds(spec: PodSpec) -> list[str]:
    argv: list[str] = []
    wanted = [f"/dev/nvidia{i.strip()}" for i in spec.gpu_ids.split(",") if i.strip().isdigit()]
    for path in [*GPU_DEVICES, *wanted]:
        if os.path.exists(path):
            argv += ["--dev-bind", path, path]
    return argv


def _parent_dirs(paths, covered: Iterable[str] = ()) -> list[str]:
    """Traversable (0755) directories above each bound path. bwrap would otherwise copy a
    parent's mode from the host, and /root or a private temporary directory (0700) would
    lock the pod's uid out of its own Python or work dir. Those the system binds show are
    there already, but not inside a covered path (an empty tmpfs)."""
    system = (*SYSTEM_DIRS, "/dev", "/proc")
    parents: set[str] = set()
    for path in paths:
        for parent in Path(path).parents:
            text = str(parent)
            if text != "/" and (
                not _inside(text, system)
                or _inside(text, covered)
                or _inside(os.path.realpath(text), covered)  # through a link into one
            ):
                parents.add(text)
    argv: list[str] = []
    for parent in sorted(parents, key=lambda p: (p.count("/"), p)):
        argv += ["--perms", "0755", "--dir", parent]
    return argv


def _interpreter_dirs() -> list[Path]:
    """The agent's Python (its environment and the installation it comes from), which sets
    the pod's environment (`_env_argv`), where the system directories do not hold it."""
    found = []
    for prefix in (Path(sys.prefix), Path(sys.base_prefix)):
        text = str(prefix)
        if prefix.is_dir() and not any(text == s or text.startswith(s + "/") for s in SYSTEM_DIRS):
            found.append(prefix)
    return found


def bwrap_argv(spec: PodSpec, *, fds: Mapping[str, int]) -> list[str]:
    """The bubblewrap command line. `fds` holds the open descriptors it reads: "seccomp" (the
    filter) and each identity file's path (its content)."""
    assert spec.isolation is not None and spec.isolation.bwrap is not None
    covered = _covered(spec)
    argv = [spec.isolation.bwrap, *_system_binds(), *_cgroup_binds(spec), *_hidden_binds(covered)]
    for path, fd in fds.items():
        if path.startswith("/"):
            argv += ["--perms", "0644", "--ro-bind-data", str(fd), path]
    argv += [
        "--dev",
        "/dev",
        *_gpu_binds(spec),
        "--proc",
        "/proc",
        "--perms",
        "1777",
        "--size",
        str(spec.tmp_mib * MIB),
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(spec.shm_mib * MIB),
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--size",
        str(64 * MIB),
        "--tmpfs",
        "/var/tmp",
        "--dir",
        "/run",
        "--tmpfs",
        "/mnt",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        spec.name[:63],
        "--die-with-parent",
        "--new-session",
    ]
    if os.geteuid() != 0:
        # Unprivileged bwrap (SANDBOX=insecure only) maps the agent's uid into a user
        # namespace; without a netns of its own the pod shares the host's network.
        argv.append("--unshare-user-try")
    if "seccomp" in fds:
        argv += ["--seccomp", str(fds["seccomp"])]
    readable = list(dict.fromkeys([*spec.readable, *_interpreter_dirs()]))
    argv += _parent_dirs([*readable, spec.work_dir, *spec.writable], covered)
    for path in readable:
        argv += ["--ro-bind", str(path), str(path)]
    for path in dict.fromkeys([spec.work_dir, *spec.writable]):
        argv += ["--bind", str(path), str(path)]
    if spec.data_dir is not None:
        argv += ["--bind", str(spec.data_dir), str(DATA_MOUNT)]
    return [*argv, "--chdir", str(spec.work_dir), "--"]


# Run by the agent's python as the pod's own user, the last step before its shell: reads the
# pod's environment ("NAME=value" strings, each ended by a NUL) and execs the shell with it.
# Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec: both
# are given back their default (a write past RLIMIT_FSIZE kills the writer, exit 153).
_ENV_EXEC = (
    "import os, signal, sys\n"
    "for signum in (signal.SIGPIPE, signal.SIGXFSZ):\n"
    "    signal.signal(signum, signal.SIG_DFL)\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    data = f.read()\n"
    "env = dict(item.split(b'=', 1) for item in data.split(b'\\0') if b'=' in item)\n"
    "os.execve(sys.argv[2], sys.argv[2:], env)\n"
)


def _env_argv(path: str) -> list[str]:
    """Set the pod's environment only once it is the pod's own user. The processes before
    (cgroup-join, nsenter, bwrap, prlimit, setpriv) run as root, most of them in the host's
    mount tree, with the shim's fixed environment: a job's LD_PRELOAD naming a library its
    earlier pod wrote, LD_DEBUG_OUTPUT naming a host file or GLIBC_TUNABLES would otherwise
    be obeyed by the dynamic loader of each, as root. Not `env -i NAME=value …`: bwrap's
    command line, which any user of the host can read while the pod runs, would show the
    job's variables."""
    return [sys.executable, "-I", "-S", "-c", _ENV_EXEC, path]


def _env_data(env: Mapping[str, str]) -> bytes:
    return b"".join(
        f"{name}={value}".encode("utf-8", errors="surrogateescape") + b"\0"
        for name, value in env.items()
        if "\0" not in name + value and "=" not in name
    )


def command_argv(spec: PodSpec, *, fds: Mapping[str, int]) -> list[str]:
    """The pod's whole process chain. `fds` are the descriptors `_open_fds` opened: the
    command's and the environment's among them (bound at COMMAND_PATH and ENV_PATH in the
    sandbox, else read from /dev/fd)."""
    script = COMMAND_PATH if spec.sandboxed else f"/dev/fd/{fds['command']}"
    env = ENV_PATH if spec.sandboxed else f"/dev/fd/{fds['env']}"
    inner = [*_limits_argv(spec), *_drop_argv(spec), *_env_argv(env), *shell_argv(script)]
    if not spec.sandboxed:
        setpriv = shutil.which("setpriv")  # die with the shim, as bwrap's --die-with-parent does
        inner = [setpriv, "--pdeathsig", "KILL", "--", *inner] if setpriv else inner
        return [*(spec.cgroup.join_argv() if spec.cgroup else []), *inner]
    outer: list[str] = list(spec.cgroup.join_argv()) if spec.cgroup else []
    if spec.netns:
        outer += [shutil.which("nsenter") or "nsenter", f"--net={netns.path(spec.netns)}", "--"]
    bwrap = str(spec.isolation.bwrap)  # its options: `_bwrap_args_fd`
    return [*outer, bwrap, "--args", str(fds[BWRAP_ARGS]), "--", *inner]


# bwrap reads its options from a descriptor (`--args`): its command line, which is the
# sandbox's pid 1's (/proc/1/cmdline in the pod) and which any user of the host can read,
# would show the host's paths (the work root, the cgroup of the agent, the binds).
BWRAP_ARGS = "bwrap-args"


def _bwrap_args_fd(spec: PodSpec, fds: Mapping[str, int]) -> int:
    _, *options, _ = bwrap_argv(spec, fds=fds)
    return _data_fd(b"".join(o.encode("utf-8", errors="surrogateescape") + b"\0" for o in options))


def _data_fd(data: bytes) -> int:
    fd = os.memfd_create("paiweb-pod", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _open_fds(spec: PodSpec) -> dict[str, int]:
    """The descriptors the pod's chain reads at start: the command (a script of any size)
    and, in the sandbox, what bwrap reads (the seccomp filter, the identity files). The
    caller closes them once it has started. The command's Windows line ends (CRLF, as a
    browser sends a text box's lines, or a script saved on Windows) are read as LF: bash
    would take each CR for part of a word ("cd: $'/tmp\\r': No such file or directory")."""
    script = spec.command.replace("\r\n", "\n")
    command = _data_fd(script.encode("utf-8", errors="surrogateescape"))
    env = _data_fd(_env_data(spec.env))
    if not spec.sandboxed:
        return {"command": command, "env": env}
    fds: dict[str, int] = {COMMAND_PATH: command, ENV_PATH: env}
    program = seccomp.pod_filter()
    if program is not None:
        fds["seccomp"] = seccomp.filter_fd(program)
    if spec.uid:
        for path, data in _identity_files(spec).items():
            fds[path] = _data_fd(data)
    fds[BWRAP_ARGS] = _bwrap_args_fd(spec, fds)
    return fds


# --- the running pod: its shim ------------------------------------------------------------


class ShimError(OSError):
    """The pod's shim could not start its process (the reason is the message)."""


def _cgroup_record(group: cgroups.PodCgroup | None) -> dict | None:
    """What the shim needs to empty the pod's cgroup at its end."""
    if group is None:
        return None
    host = group.host
    return {
        "version": host.version,
        "root": str(host.root),
        "name": group.name,
        "hierarchies": {k: str(v) for k, v in host.hierarchies.items()},
    }


def process_alive(pid: int | None, marker: str = "") -> bool:
    """Whether `pid` runs (a zombie does not) and, given a `marker`, is the process whose
    argv names it (a pid reused by another process is not it)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            if stat.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return False
        if not marker:
            return True
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return marker.encode() in cmdline.read()
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class Exit:
    """How a pod ended: its exit code (None: it vanished with its shim) and when (epoch)."""

    code: int | None
    at: float
    vanished: bool = False


class PodProcess:
    """The agent's handle on a pod that its shim (apps/agent/shim.py) runs.

    `start()` spawns the shim; `adopt()` finds one an earlier agent started. Either way
    stopping writes the stop file (the shim escalates to SIGKILL on its own, agent or not),
    and the exit is read from exit.json: the code and the time the process ended."""

    def __init__(
        self,
        state_dir: Path,
        *,
        spec: PodSpec | None = None,
        popen: subprocess.Popen | None = None,
        started: dict | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.spec = spec
        self.popen = popen  # only when this agent started the shim (it reaps it)
        started = started or {}
        self.pid: int = int(started.get("pid") or 0)
        self.shim_pid: int = int(started.get("shim") or (popen.pid if popen else 0))
        self.started_at: float = float(started.get("at") or time.time())
        self.stop_requested_at: float | None = (
            time.monotonic() if (state_dir / shim.STOP).exists() else None
        )
        self._exit: Exit | None = None
        self._log_path = Path(spec.log_path) if spec else None

    # -- starting and finding --

    @classmethod
    def spawn(
        cls, spec: PodSpec, state_dir: Path, *, grace: float = 30.0, timeout: float = 30.0
    ) -> PodProcess:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for stale in (shim.STARTED, shim.STOP, shim.EXIT):
            (state_dir / stale).unlink(missing_ok=True)
        fds = _open_fds(spec)
        try:
            shim.write_json(
                state_dir / shim.SPEC,
                {
                    "name": spec.name,
                    "argv": command_argv(spec, fds=fds),
                    "cwd": str(spec.work_dir),
                    "log_path": str(spec.log_path),
                    "log_max_bytes": spec.log_max_bytes,
                    "sandboxed": spec.sandboxed,
                    "description": describe(spec),
                    "fds": sorted(fds.values()),
                    "grace": grace,
                    "cgroup": _cgroup_record(spec.cgroup),
                    "base_dir": str(_BASE_DIR),
                },
            )
            with (state_dir / "shim.log").open("ab") as out:
                popen = subprocess.Popen(
                    [sys.executable, "-I", str(Path(shim.__file__)), str(state_dir)],
                    cwd=state_dir,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=tuple(fds.values()),
                )
        finally:
            for fd in fds.values():
                os.close(fd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (started := shim.read_json(state_dir / shim.STARTED)) is not None:
                return cls(state_dir, spec=spec, popen=popen, started=started)
            if (
                ended := shim.read_json(state_dir / shim.EXIT)
            ) is not None or popen.poll() is not None:
                popen.wait()
                why = (
                    (ended or {}).get("error")
                    or _tail(state_dir / "shim.log")
                    or f"the shim exited with code {popen.returncode}"
                )
                raise ShimError(why)
            time.sleep(0.01)
        popen.kill()
        popen.wait()
        raise ShimError(f"the pod did not start within {timeout:g}s")

    @classmethod
    def adopt(cls, state_dir: Path) -> PodProcess | None:
        """The pod an earlier agent started in `state_dir`, running or ended; None when
        its process never started (no started.json: the agent died before)."""
        started = shim.read_json(state_dir / shim.STARTED)
        if started is None:
            return None
        process = cls(state_dir, started=started)
        spec = shim.read_json(state_dir / shim.SPEC) or {}
        process._log_path = Path(spec["log_path"]) if spec.get("log_path") else None
        return process

    # -- stopping --

    def request_stop(self, grace: float) -> None:
        """SIGTERM now, SIGKILL after `grace` seconds: the shim does both. A second request
        only ever shortens the grace."""
        if self.poll() is not None:
            return
        current = _stop_grace(self.state_dir)
        if current is None or grace < current:
            tmp = self.state_dir / f".stop.{os.getpid()}"
            try:
                tmp.write_text(f"{max(grace, 0.0):g}")
                os.replace(tmp, self.state_dir / shim.STOP)
            except FileNotFoundError:  # the pod ended and its state was swept meanwhile
                return
            except OSError:  # the state's disk is full: the shim's own stop, SIGTERM, with
                tmp.unlink(missing_ok=True)  # the grace of its spec (the job's)
                if self.shim_pid and self.alive():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(self.shim_pid, signal.SIGTERM)
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        self._wake()

    def kill(self) -> None:
        self.request_stop(0)

    def _wake(self) -> None:
        if self.shim_pid and self.alive():
            try:
                os.kill(self.shim_pid, signal.SIGUSR1)
            except (ProcessLookupError, PermissionError):
                pass

    # -- how it is --

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return process_alive(self.shim_pid, str(self.state_dir))

    def result(self) -> Exit | None:
        """How the pod ended, or None while it runs."""
        if self._exit is not None:
            return self._exit
        ended = shim.read_json(self.state_dir / shim.EXIT)
        if ended is None and not self.alive():
            ended = shim.read_json(self.state_dir / shim.EXIT)  # it wrote, then exited
            if ended is None:
                self._exit = Exit(code=None, at=time.time(), vanished=True)
        if ended is not None:
            code = ended.get("code")
            self._exit = Exit(
                code=int(code) if isinstance(code, int) else None,
                at=float(ended.get("at") or time.time()),
            )
        if self._exit is not None and self.popen is not None:
            self.popen.wait()  # reap our shim
        return self._exit

    def ending_since(self) -> float | None:
        """While its exit is not yet written: when its shim said the pod's process ended
        (the modification time of shim.ENDING, never after the end exit.json will say),
        else None (it runs, or a shim from before does not say)."""
        try:
            return (self.state_dir / shim.ENDING).stat().st_mtime
        except OSError:
            return None

    def poll(self) -> int | None:
        """The exit code once the pod ended (-1 if it vanished without one), else None."""
        ended = self.result()
        if ended is None:
            return None
        return -1 if ended.code is None else ended.code

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return code

    def stop(self, grace: float) -> int:
        """Blocking stop: SIGTERM, up to `grace` seconds, SIGKILL; returns the exit code."""
        self.request_stop(grace)
        return self.wait()

    def finish(self) -> int:
        return self.wait()

    def note(self, message: str) -> None:
        """A line from the agent in the pod's log (appended beside the shim's writes)."""
        if self._log_path is None:
            return
        try:
            with self._log_path.open("ab") as log:
                log.write(f"[paiweb] {shim._stamp()} {message}\n".encode())
        except OSError:
            pass

    def discard(self) -> None:
        """The exit is reported: forget the pod's state."""
        shutil.rmtree(self.state_dir, ignore_errors=True)


def running_shims(state_dir: Path) -> list[int]:
    """The pids of the shims still running under an AGENT_STATE_DIR (every agent's)."""
    found = []
    for started in state_dir.glob(f"*/*/{shim.STARTED}"):
        data = shim.read_json(started) or {}
        if data.get("shim") and PodProcess(started.parent, started=data).alive():
            found.append(int(data["shim"]))
    return found


def _stop_grace(state_dir: Path) -> float | None:
    try:
        return float((state_dir / shim.STOP).read_text().strip() or 0)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return 0.0


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace").strip()
    except OSError:
        return ""


def describe(spec: PodSpec) -> str:
    """The pod's isolation in a few words, for its log and its PodStarted event."""
    if spec.isolation is None:
        return "bare process"
    memory = (f"{spec.memory_mib} MiB" if spec.memory_mib else "no limit") + (
        " (cgroup)" if spec.cgroup else " (address space)" if spec.memory_mib else ""
    )
    # "strict", the word of the pod's events and the health page
    head = spec.isolation.mode if spec.strict else spec.isolation.detail
    return f"sandbox: {head}; uid {spec.uid or os.geteuid()}; memory {memory}"


def start(spec: PodSpec, state_dir: Path | None = None, *, grace: float = 30.0) -> PodProcess:
    """Start the pod under a shim of its own (its directories exist: see `ensure_dir`).
    `state_dir` is where the shim keeps its state (a new temporary one if None); `grace`
    is what a SIGTERM to the shim gives the pod. Raises OSError if it cannot start."""
    if state_dir is None:
        state_dir = Path(tempfile.mkdtemp(prefix="paiweb-pod-"))
    return PodProcess.spawn(spec, state_dir, grace=grace)


# --- files a pod can write: hostile --------------------------------------------------------


def ensure_dir(path: Path, *, under: Path, uid: int = -1) -> None:
    """mkdir -p `path` (inside `under`, which must exist) without following a symlink at
    any step — a pod may have replaced a directory of its own with a link to /etc — and
    give each directory it walks below `under` to `uid` (when not -1)."""
    rel = Path(path).relative_to(under)
    if ".." in rel.parts:
        raise OSError(f"{path}: '..' in a pod path")
    fd = os.open(under, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in rel.parts:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            child = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = child
            if uid >= 0:
                os.fchown(fd, uid, uid)
    finally:
        os.close(fd)


MANIFEST_READ_MAX = 1 * MIB  # per call: a pod writing a huge manifest is read over time
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{12})\.pkl$")  # EasyCkpt's finished files
MANIFEST_LINE_MAX = 16 * 1024
CHECKPOINT_PATH_MAX = 512  # a recorded path (the directory's and the name): Checkpoint.path
# Checkpoint records taken from one read (the agent reads every second): each is a row and
# three queries, so a pod appending thousands of lines a second would fill the database and
# hold up the agent's watch of every other pod. The newest are kept: EasyCkpt appends in
# order, and the newest checkpoint is what resuming and the work lost go by.
MANIFEST_ENTRIES_MAX = 16
MANIFEST_DAMAGED_MAX = 64  # files a load passed over, named in one record
_MAX_INT = 2**62


class ManifestReader:
    """Reads the lines EasyCkpt appends to a checkpoint directory's manifest.jsonl, each
    once: only lines added after the reader was made (an earlier attempt's are history), or
    after `offset` (where the file ended before the pod started, or where an earlier reader
    of the same pod stopped: the agent makes its reader before it starts the pod's process,
    so that the lines the pod writes in its first instants are not taken for history).

    The pod owns that file, so it is read as hostile: opened without following a link and
    without blocking (a FIFO never hangs the agent), regular files only, at most
    MANIFEST_READ_MAX bytes a call, lines up to MANIFEST_LINE_MAX, every field checked, at
    most MANIFEST_ENTRIES_MAX records a call.
    What cannot be used is counted in `problems` (one sentence each), never raised."""

    def __init__(self, directory: Path, *, offset: int | None = None) -> None:
        self.path = Path(directory) / "manifest.jsonl"
        self.offset = 0
        self.problems: list[str] = []
        self._reported: set[str] = set()
        self.present: dict[str, str] = {}  # checkpoint file name -> its recorded path
        if offset is None:
            data = self._read(0, whole=True)
            offset = data if isinstance(data, int) else 0
        self.offset = max(offset, 0)

    def _problem(self, text: str) -> None:
        if text not in self._reported and len(self._reported) < 20:
            self._reported.add(text)
            self.problems.append(text)

    def _read(self, offset: int, whole: bool = False) -> bytes | int | None:
        """The bytes from `offset` (or, with `whole`, just the file's size); None when
        there is no regular file to read."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._problem(f"cannot open {self.path.name}: {exc.strerror or exc}")
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self._problem(f"{self.path.name} is not a regular file: ignored")
                return None
            if whole:
                return info.st_size
            if info.st_size < offset:  # truncated or replaced: start over from its end
                self.offset = info.st_size
                return b""
            return os.pread(fd, MANIFEST_READ_MAX, offset)
        finally:
            os.close(fd)

    def track(self, paths: Iterable[str]) -> None:
        """Recorded checkpoints of this directory whose files `gone` looks for."""
        for path in paths:
            p = Path(path)
            if p.parent == self.path.parent and p.name not in ("", ".", ".."):
                self.present[p.name] = path

    def gone(self) -> list[str]:
        """The recorded paths among those tracked whose files are no longer there (each once).
        The directory is the pod's: opened without following a link, each name looked up in
        it without following one; a directory that is gone, or is now a link, has none."""
        if not self.present:
            return []
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path.parent, flags)
        except OSError:
            fd = -1
        try:
            missing = []
            for name in list(self.present):
                if fd >= 0:
                    try:
                        if stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                            continue
                    except OSError:
                        pass
                missing.append(self.present.pop(name))
            return missing
        finally:
            if fd >= 0:
                os.close(fd)

    def unannounced(self, *, limit: int = 64) -> list[dict]:
        """Checkpoint files of the directory (EasyCkpt's `ckpt-<12 digits>.pkl`, regular
        files) that neither an earlier record nor a manifest line names: a pod stopped
        between renaming its checkpoint into place and appending its manifest line leaves
        one, and the next attempt resumes from it. Each as a manifest entry, its time the
        file's mtime; the newest `limit` at most. Read as `gone` reads: no link followed."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path.parent, flags)
        except OSError:
            return []
        try:
            found = []
            with os.scandir(fd) as names:
                for item in names:
                    match = CHECKPOINT_NAME.match(item.name)
                    if match is None or item.name in self.present:
                        continue
                    try:
                        info = os.stat(item.name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(info.st_mode):
                        found.append(
                            {
                                "step": int(match[1]),
                                "file": item.name,
                                "bytes": info.st_size,
                                "time": self._not_ahead(info.st_mtime, item.name),
                            }
                        )
            return sorted(found, key=lambda e: e["step"])[-limit:]
        finally:
            os.close(fd)

    def new_entries(self) -> list[dict]:
        data = self._read(self.offset)
        if not isinstance(data, bytes) or not data:
            return []
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) >= MANIFEST_LINE_MAX:  # one endless line: skip what was read
                self.offset += len(data)
                self._problem(
                    f"a line of {self.path.name} is longer than {MANIFEST_LINE_MAX} bytes: skipped"
                )
            return []
        self.offset += end
        entries = []
        for line in data[:end].splitlines():
            entry = self._parse(line)
            if entry is not None:
                entries.append(entry)
        if len(entries) > MANIFEST_ENTRIES_MAX:
            self._problem(
                f"{self.path.name} grew by more than {MANIFEST_ENTRIES_MAX} checkpoint records "
                f"at once: only the newest {MANIFEST_ENTRIES_MAX} of them are recorded"
            )
            entries = entries[-MANIFEST_ENTRIES_MAX:]
        return entries

    def _parse(self, line: bytes) -> dict | None:
        if not line.strip():
            return None
        if len(line) > MANIFEST_LINE_MAX:
            self._problem(
                f"a line of {self.path.name} is longer than {MANIFEST_LINE_MAX} bytes: skipped"
            )
            return None
        try:
            raw = json.loads(line)
            if isinstance(raw, dict) and "resumed" in raw:
                return self._parse_resumed(raw)
            step, name = int(raw["step"]), str(raw["file"])
            size, at = int(raw.get("bytes", 0)), float(raw["time"])
        except (ValueError, KeyError, TypeError, RecursionError, OverflowError):
            self._problem(f"a line of {self.path.name} is not a checkpoint record: skipped")
            return None
        if not self._name_ok(name):
            return None
        if not (0 <= step < _MAX_INT) or not math.isfinite(at) or not 0 < at < 4102444800:
            self._problem(
                f"a checkpoint record of {self.path.name} has an impossible step or time: skipped"
            )
            return None
        return {
            "step": step,
            "file": name,
            "bytes": min(max(size, 0), _MAX_INT),
            "time": self._not_ahead(at, name),
        }

    def _parse_resumed(self, raw: dict) -> dict | None:
        """EasyCkpt's word of what a load resumed from (`resumed`: the step, or null for the
        start, and its `file`) and the newer files it passed over as `damaged`, checked as
        a checkpoint record is: {"resumed": step | None, "file": name | None, "damaged":
        [names]} (at most MANIFEST_DAMAGED_MAX of them), or None."""
        step, name, damaged = raw["resumed"], raw.get("file"), raw.get("damaged")
        if step is not None:
            step = int(step)
            if not 0 <= step < _MAX_INT or not isinstance(name, str):
                raise ValueError(step)
        elif name is not None:
            raise ValueError(name)
        if not isinstance(damaged, list) or not damaged:
            raise ValueError(damaged)
        damaged = [str(d) for d in damaged[:MANIFEST_DAMAGED_MAX]]
        if (name is not None and not self._name_ok(name)) or not all(
            self._name_ok(d) for d in damaged
        ):
            return None
        return {"resumed": step, "file": name, "damaged": damaged}

    def _name_ok(self, name: str) -> bool:
        """A checkpoint file named by the pod is inside its directory and can be recorded."""
        path = Path(name)
        if (
            not name
            or path.is_absolute()
            or ".." in path.parts
            or len(name) > CHECKPOINT_PATH_MAX
            or "\x00" in name
        ):
            self._problem(
                f"checkpoint file {name[:80]!r} is not inside the checkpoint directory: skipped"
            )
            return False
        try:  # the record's path, as the database stores it: UTF-8, and not too long
            stored = len(str(self.path.parent / name).encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate ("\udc80" in JSON)
            stored = None
        if stored is None or stored > CHECKPOINT_PATH_MAX:
            self._problem(
                f"checkpoint file {name[:80]!r} cannot be recorded (not UTF-8, or its path "
                f"longer than {CHECKPOINT_PATH_MAX} bytes): skipped"
            )
            return False
        return True

    def _not_ahead(self, at: float, name: str) -> float:
        """A checkpoint's time, no later than now: the pod and its agent share the host's
        clock, so a time ahead of it (a clock set back, a record made up) is taken as the
        moment it was read. Recorded as stamped, it would count as newer than the
        checkpoints after it and as saved after the interruption it preceded."""
        now = time.time()
        if at <= now:
            return at
        self._problem(
            f"checkpoint {name[:80]!r} is stamped ahead of this host's clock: "
            "recorded at the time it was read"
        )
        return now
