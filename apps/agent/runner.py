"""Run one pod: a shell command as its own process tree, in a bubblewrap sandbox where one
works, with its output captured to a size-capped log file.

Pure Python, no Django: the agent builds a `PodSpec`, `start()` returns a `PodProcess` that
the agent polls, stops and reaps. The tests drive it directly.

Signals. Unsandboxed, the shell leads a new session and process group, so a signal to the
group reaches the whole pod. Sandboxed, bwrap's monitor leads that group, and a SIGTERM to
it would kill bwrap at once (and, by --die-with-parent, SIGKILL the pod with no grace). So
stop() signals every *descendant* of bwrap instead — the pod's own processes receive the
SIGTERM and may clean up — and escalates to SIGKILL on bwrap's group, which tears down the
whole pid namespace.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

SANDBOX_MODES = ("auto", "bwrap", "none")
DATA_MOUNT = Path("/mnt/data")
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024


class SandboxUnavailable(RuntimeError):
    """SANDBOX=bwrap was asked for, but bubblewrap is missing or cannot make namespaces."""


# --- the sandbox -------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxStatus:
    """What pods on this host get: `mode` is "bwrap" or "none"; `detail` says why."""

    requested: str
    mode: str
    bwrap_available: bool
    detail: str

    @property
    def sandboxed(self) -> bool:
        return self.mode == "bwrap"


@functools.cache
def _bwrap_probe() -> tuple[bool, str]:
    """Can bubblewrap build the sandbox pods use? Cached: a host does not change its mind."""
    path = shutil.which("bwrap")
    if path is None:
        return False, "bubblewrap is not installed (apt-get install bubblewrap)"
    argv = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--die-with-parent", "--new-session", "true"]
    try:
        probe = subprocess.run(argv, capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{path} failed to run: {exc}"
    if probe.returncode != 0:
        why = probe.stderr.decode(errors="replace").strip() or f"exit code {probe.returncode}"
        return False, f"{path} cannot create namespaces here: {why}"
    return True, path


def sandbox_status(requested: str = "auto") -> SandboxStatus:
    """The sandbox pods started on this host get, for SANDBOX=auto|bwrap|none."""
    if requested not in SANDBOX_MODES:
        raise ValueError(f"SANDBOX: expected one of {SANDBOX_MODES}, got {requested!r}")
    available, detail = _bwrap_probe()
    if requested == "none":
        return SandboxStatus(requested, "none", available, "disabled by SANDBOX=none")
    if available:
        return SandboxStatus(requested, "bwrap", True, f"bubblewrap ({detail})")
    return SandboxStatus(requested, "none", False, f"unsandboxed: {detail}")


# --- what to run -------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSpec:
    """Everything needed to start one pod's process.

    Paths are host paths. In the sandbox, `writable` and `readable` appear at the same paths
    (after `hidden` is covered by empty tmpfs mounts, so binds re-expose only what is named),
    and `data_dir` appears at /mnt/data. Unsandboxed, none of that isolation exists: the
    command sees the host as the agent's user does.
    """

    name: str
    command: str
    work_dir: Path
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    sandbox: str = "none"  # "bwrap" | "none": resolve "auto" with sandbox_status() first
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    data_dir: Path | None = None
    memory_mib: int = 0  # RLIMIT_AS per process; 0 = no limit
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES


def shell_argv(command: str) -> list[str]:
    """bash -c, else sh -c. Not a login shell: /etc/profile would reset PATH."""
    bash = shutil.which("bash")
    return [bash, "-c", command] if bash else ["/bin/sh", "-c", command]


def _limits_argv(spec: PodSpec) -> list[str]:
    prlimit = shutil.which("prlimit")
    if spec.memory_mib <= 0 or prlimit is None:
        return []
    return [prlimit, f"--as={spec.memory_mib * 1024 * 1024}", "--"]


def bwrap_argv(spec: PodSpec) -> list[str]:
    """The bubblewrap command line: read-only host, private /tmp and /mnt, fresh /dev and
    /proc (a pid namespace, so other processes' environments are invisible), `hidden` paths
    covered, then only the pod's own paths bound back in."""
    argv = [shutil.which("bwrap") or "bwrap",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/mnt",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", spec.name[:63],
            "--die-with-parent", "--new-session"]
    for path in sorted({str(p) for p in spec.hidden}, key=len):
        argv += ["--tmpfs", path]
    for path in spec.readable:
        argv += ["--ro-bind", str(path), str(path)]
    for path in dict.fromkeys([spec.work_dir, *spec.writable]):
        argv += ["--bind", str(path), str(path)]
    if spec.data_dir is not None:
        argv += ["--bind", str(spec.data_dir), str(DATA_MOUNT)]
    return [*argv, "--chdir", str(spec.work_dir), "--"]


def command_argv(spec: PodSpec) -> list[str]:
    inner = [*_limits_argv(spec), *shell_argv(spec.command)]
    if spec.sandbox == "bwrap":
        return [*bwrap_argv(spec), *inner]
    setpriv = shutil.which("setpriv")  # die with the agent, as bwrap's --die-with-parent does
    return [setpriv, "--pdeathsig", "KILL", "--", *inner] if setpriv else inner


# --- the running pod ---------------------------------------------------------------------


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class LogWriter:
    """Appends a pod's output to its log file, keeping at most `max_bytes` of it and then a
    notice that the rest was dropped (the pod is never blocked: the pipe is always drained)."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("ab", buffering=0)
        self.max_bytes = max_bytes
        self.written = self.file.tell()
        self.dropped = 0
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock:
            room = max(self.max_bytes - self.written, 0)
            if room:
                self.file.write(data[:room])
                self.written += min(room, len(data))
            if len(data) > room:
                if not self.dropped:
                    self.file.write(
                        f"\n[log truncated: output beyond POD_LOG_MAX_BYTES={self.max_bytes} "
                        f"bytes is discarded]\n".encode())
                self.dropped += len(data) - room

    def note(self, message: str) -> None:
        """A line from paiweb itself; always written, even past the cap."""
        with self.lock:
            self.file.write(f"[paiweb] {_stamp()} {message}\n".encode())

    def close(self) -> None:
        with self.lock:
            self.file.close()


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, parents before children (Linux /proc)."""
    children, found, stack = _children_map(), [], [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def exit_code(returncode: int) -> int:
    """A shell-style exit code: a process killed by signal N exits 128+N (as bwrap reports)."""
    return 128 - returncode if returncode < 0 else returncode


class PodProcess:
    """A started pod. Thread-safe enough for one supervisor thread plus stop requests."""

    def __init__(self, spec: PodSpec) -> None:
        self.spec = spec
        self.log = LogWriter(spec.log_path, spec.log_max_bytes)
        self.kill_at: float | None = None
        self.stop_requested_at: float | None = None
        self._returncode: int | None = None
        limit = f"{spec.memory_mib} MiB address space" if _limits_argv(spec) else "none"
        self.log.note(f"starting pod {spec.name} (sandbox: {spec.sandbox}; memory limit: {limit})")
        try:
            self.popen = subprocess.Popen(
                command_argv(spec), cwd=spec.work_dir, env=dict(spec.env),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            self.log.note(f"could not start: {exc}")
            self.log.close()
            raise
        self.pid = self.popen.pid
        self.started_at = time.monotonic()
        self._pump = threading.Thread(target=self._drain, name=f"log-{spec.name}", daemon=True)
        self._pump.start()

    def _drain(self) -> None:
        fd = self.popen.stdout.fileno()
        while chunk := os.read(fd, 65536):
            self.log.write(chunk)
        self.popen.stdout.close()

    # -- signals --

    def _signal_tree(self, signum: int) -> None:
        targets = descendants(self.pid)
        if self.spec.sandbox != "bwrap":
            targets.append(self.pid)
            try:
                os.killpg(self.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in targets:
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def terminate(self) -> None:
        """SIGTERM to every process of the pod (not to bwrap: see the module docstring)."""
        self._signal_tree(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the pod's process group and everything below it."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._signal_tree(signal.SIGKILL)

    def request_stop(self, grace: float) -> None:
        """SIGTERM now; `tick()` sends SIGKILL once `grace` seconds have passed."""
        if self.poll() is not None:
            return
        now = time.monotonic()
        if self.stop_requested_at is None:
            self.stop_requested_at = now
            self.log.note(f"stopping: SIGTERM, then SIGKILL after {grace:g}s")
        self.terminate()
        deadline = now + max(grace, 0.0)
        self.kill_at = deadline if self.kill_at is None else min(self.kill_at, deadline)

    def tick(self) -> None:
        if self.kill_at is not None and time.monotonic() >= self.kill_at and self.poll() is None:
            self.log.note("grace period over: SIGKILL")
            self.kill()
            self.kill_at = float("inf")

    # -- waiting --

    def poll(self) -> int | None:
        if self._returncode is None and self.popen.poll() is not None:
            self._returncode = exit_code(self.popen.returncode)
        return self._returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if still running after `timeout` seconds (tick()s while
        waiting, so a requested stop escalates on time)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            self.tick()
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return None
            try:
                self.popen.wait(timeout=left)
            except subprocess.TimeoutExpired:
                pass
        return code

    def stop(self, grace: float) -> int:
        """Blocking stop: SIGTERM, up to `grace` seconds, SIGKILL; returns the exit code."""
        self.request_stop(grace)
        return self.wait()

    def finish(self) -> int:
        """After exit: sweep up leftovers, collect the last output, close the log."""
        code = self.wait()
        if self.spec.sandbox != "bwrap":
            try:
                os.killpg(self.pid, signal.SIGKILL)  # background children outliving the shell
            except (ProcessLookupError, PermissionError):
                pass
        self._pump.join(timeout=5)
        self.log.note(f"exited with code {code}")
        self.log.close()
        return code


def start(spec: PodSpec) -> PodProcess:
    """Create the pod's directories and start it. Raises OSError if it cannot start."""
    spec.work_dir.mkdir(parents=True, exist_ok=True)
    for path in spec.writable:
        Path(path).mkdir(parents=True, exist_ok=True)
    if spec.data_dir is not None:
        spec.data_dir.mkdir(parents=True, exist_ok=True)
    return PodProcess(spec)


class ManifestReader:
    """Reads the lines EasyCkpt appends to a checkpoint directory's manifest.jsonl, each
    once: only lines added after the reader was made (an earlier attempt's are history)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / "manifest.jsonl"
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def new_entries(self) -> list[dict]:
        import json

        try:
            with self.path.open("rb") as manifest:
                manifest.seek(self.offset)
                data = manifest.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        entries = []
        for line in complete.splitlines():
            try:
                entry = json.loads(line)
                entries.append({"step": int(entry["step"]), "file": str(entry["file"]),
                                "bytes": int(entry.get("bytes", 0)),
                                "time": float(entry["time"])})
            except (ValueError, KeyError, TypeError):
                continue  # a line we cannot read is skipped, not fatal
        return entries
