"""A pod's own supervisor process: it outlives the agent that started it.

    python -I apps/agent/shim.py STATE_DIR

In the spirit of containerd-shim and conmon: the agent starts one shim per pod, in a session
of its own, and the shim starts the pod's process chain (runner.command_argv) as its child.
The shim holds what must survive an agent restart or upgrade: the pod's process (bwrap's
--die-with-parent and setpriv's --pdeathsig tie the pod to the shim, not to the agent), the
pipe of its output (appended to the size-capped log), the stop escalation (SIGTERM, the grace
period, SIGKILL) and the exit status with the moment the process ended. A new agent re-adopts
a running pod by reading STATE_DIR; a pod that ended while no agent watched still has its
real exit code and time there.

STATE_DIR is the agent's (mode 0700, outside anything a pod can see):

    spec.json     the agent, before the start: argv, cwd, log file and cap, cgroup, fds
    started.json  the shim, once the pod's process runs: {"shim", "pid", "at"}
    stop          the agent, to stop the pod: the grace period in seconds (SIGUSR1 wakes us)
    ending.json   the shim, the moment the pod's process ended, before its last output is
                  collected: its modification time is never after the end exit.json says
    exit.json     the shim, when the pod ended: {"code", "at"} (or {"error"} if it never ran)

Lean on purpose, since one runs per pod: the standard library only, one thread, no Django.
SIGTERM (a host shutting down) stops the pod with its grace period, and the exit is still
written; SIGINT and SIGHUP are ignored (a terminal closing is not a stop).
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

TICK = 0.2  # seconds between checks of the stop file and the kill deadline
# Past the log's cap a pod's output is read only to be discarded, at most this many bytes a
# second: read as fast as a pod can write (`yes`), it would cost the shim a third of a core,
# which is the host's, not the pod's. The pod waits on its full pipe instead, on its own time.
DISCARD_RATE = 4 * 1024 * 1024
TIMES_SUFFIX = ".times"  # beside the log: when its bytes were written (LogWriter)
SPEC, STARTED, STOP, EXIT = "spec.json", "started.json", "stop", "exit.json"
ENDING = "ending.json"  # the pod's process ended; its exit is being written
# The environment of the pod's chain up to its own user (runner._env_argv sets the pod's):
# nothing of the job's reaches a process that runs as root.
CHAIN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _open_readable(path: Path) -> io.FileIO:
    """`path` opened to append, readable by every user (0644) whatever the shim's umask: the
    web server reads the log, and under compose it runs as another user than the agent."""
    log = path.open("ab", buffering=0)
    os.fchmod(log.fileno(), 0o644)
    return log


class LogWriter:
    """Appends a pod's output to its log file, keeping at most `max_bytes` of it and then a
    notice that the rest was dropped (the shim drains what is dropped at DISCARD_RATE).

    Beside it, `<log>.times` says when the output was written, so the log itself stays
    exactly what the pod wrote: a line "OFFSET EPOCH" (byte offset in the log, seconds
    since the epoch, to the millisecond) whenever a write starts in a new second, so at
    most one line per second of output. A byte was written at the time of the last line
    whose offset is not past it (apps/agent/logs.py reads them).

    A write the disk refuses (it is full, over a quota, failing) loses that output, never
    the pod: the shim goes on draining the pipe, and once a write succeeds again the log
    says how many bytes were lost and why."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = _open_readable(path)
        self.times = _open_readable(path.with_name(path.name + TIMES_SUFFIX))
        self.second = -1  # the second of the last time line
        self.max_bytes = max_bytes
        self.written = self.file.tell()
        self.dropped = 0
        self.lost = 0  # bytes the disk refused since the last write it took
        self.lost_why = ""
        self.lock = threading.Lock()

    def _mark(self) -> None:
        now = time.time()
        if int(now) != self.second:
            self.second = int(now)
            try:
                self.times.write(f"{self.file.tell()} {now:.3f}\n".encode())
            except OSError:
                pass  # the times are a help to the reader; the output matters more

    def _append(self, data: bytes) -> int:
        """Write `data` to the log; returns the bytes the disk took (the rest is lost)."""
        if self.lost:  # the disk takes writes again: say first what it refused
            notice = (
                f"\n[paiweb] {_stamp()} {self.lost} bytes of output were lost: "
                f"the log's disk refused them ({self.lost_why})\n"
            ).encode()
            try:
                self.file.write(notice)
            except OSError:
                self.lost += len(data)
                return 0
            self.lost = 0
        try:
            taken = self.file.write(data) or 0
        except OSError as exc:
            taken, self.lost_why = 0, exc.strerror or str(exc)
        if taken < len(data):
            self.lost += len(data) - taken
            self.lost_why = self.lost_why or "a short write"
        return taken

    def write(self, data: bytes) -> None:
        with self.lock:
            room = max(self.max_bytes - self.written, 0)
            if room:
                self._mark()
                self.written += self._append(data[:room])
            if len(data) > room:
                if not self.dropped:
                    self._mark()
                    self._append(
                        f"\n[log truncated: output beyond POD_LOG_MAX_BYTES={self.max_bytes} "
                        f"bytes is discarded]\n".encode()
                    )
                self.dropped += len(data) - room

    def note(self, message: str) -> None:
        """A line from paiweb itself; always written, even past the cap."""
        with self.lock:
            self._mark()
            self._append(f"[paiweb] {_stamp()} {message}\n".encode())

    def close(self) -> None:
        with self.lock:
            for f in (self.file, self.times):
                try:
                    f.close()
                except OSError:
                    pass


def _processes() -> dict[int, tuple[int, int, int]]:
    """Every live process: pid -> (parent, process group, start time in clock ticks)."""
    found: dict[int, tuple[int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            found[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[19]))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _children_map(processes: dict[int, tuple[int, int, int]]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    return children


def descendants(pid: int, processes: dict[int, tuple[int, int, int]] | None = None) -> list[int]:
    """Every live process below `pid`, parents before children (Linux /proc)."""
    children = _children_map(_processes() if processes is None else processes)
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for the signal (/proc: SigCgt)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def exit_code(returncode: int) -> int:
    """A shell-style exit code: a process killed by signal N exits 128+N (as bwrap reports)."""
    return 128 - returncode if returncode < 0 else returncode


def write_json(path: Path, data: dict) -> None:
    """Atomically: a reader sees the whole file or none (written aside, then renamed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Pod:
    """The pod's process, as its shim runs it: started, drained, stopped, reaped."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.sandboxed = bool(spec.get("sandboxed"))
        self.log = LogWriter(Path(spec["log_path"]), int(spec["log_max_bytes"]))
        self.kill_at: float | None = None
        self.stop_requested_at: float | None = None
        self.command_told = False  # the command process got its SIGTERM (`_terminate`)
        self.awaited: set[tuple[int, int]] = set()  # (pid, start) it ran at the stop
        self.discard_second = -1  # the second, and the bytes discarded in it (`_paced`)
        self.discarded = 0
        self.log.note(f"starting pod {spec['name']} ({spec.get('description', '')})")
        try:
            self.popen = subprocess.Popen(
                spec["argv"],
                cwd=spec["cwd"],
                env=dict(CHAIN_ENV),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=tuple(spec.get("fds", ())),
            )
        except OSError as exc:
            self.log.note(f"could not start: {exc}")
            self.log.close()
            raise
        finally:
            for fd in spec.get("fds", ()):
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.pid = self.popen.pid
        self.output = self.popen.stdout.fileno()
        os.set_blocking(self.output, False)

    # -- output --

    def drain(self, timeout: float) -> None:
        """Copy what the pod wrote to its log, waiting at most `timeout` for some."""
        if self.output < 0:
            time.sleep(timeout)
            return
        deadline = time.monotonic() + timeout
        try:
            ready, _, _ = select.select([self.output], [], [], timeout)
        except InterruptedError:
            return
        while ready:
            if self.log.dropped and self._paced(deadline):
                return
            try:
                chunk = os.read(self.output, 65536)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not chunk:  # every writer closed its end
                self.popen.stdout.close()
                self.output = -1
                return
            self.log.write(chunk)
            if self.log.dropped:
                self.discarded += len(chunk)

    def _paced(self, deadline: float) -> bool:
        """Past the log's cap: once DISCARD_RATE bytes were discarded in this second, wait
        for the next one (or `deadline`) and say so; the pipe fills and the pod waits."""
        now = time.monotonic()
        if int(now) != self.discard_second:
            self.discard_second, self.discarded = int(now), 0
            return False
        if self.discarded < DISCARD_RATE:
            return False
        time.sleep(max(0.0, min(self.discard_second + 1.0, deadline) - now))
        return True

    # -- signals --

    def _command(self, processes: dict[int, tuple[int, int, int]]) -> int | None:
        """The pod's command process: the shim's child, or in bwrap's sandbox the first
        child of bwrap's init (the oldest: orphans of the pod become the init's children
        too)."""
        if not self.sandboxed:
            return self.pid if self.pid in processes else None
        children = _children_map(processes)
        inits = children.get(self.pid, [])
        first = [c for init in inits for c in children.get(init, [])]
        return min(first, key=lambda pid: processes[pid][2]) if first else None

    def _terminate(self) -> None:
        """SIGTERM to every process of the pod but its command, which gets it at once only
        if it handles SIGTERM or runs nothing. The command is the pod's shell (bash running
        the user's script): without a trap it would die at once and take the whole sandbox
        with it, so a `python train.py` saving a checkpoint on SIGTERM would be killed
        mid-save. The shell gets its SIGTERM once what it ran at the stop has exited
        (`tick`)."""
        processes = _processes()
        command = self._command(processes)
        targets = set(descendants(self.pid, processes))
        if not self.sandboxed:  # the shell's group: what left the tree is still the pod's
            targets.update(pid for pid, (_, group, _) in processes.items() if group == self.pid)
            targets.discard(os.getpid())
        if command is not None:
            targets.discard(command)
            below = descendants(command, processes)
            if not self.command_told and (not below or catches(command, signal.SIGTERM)):
                targets.add(command)
                self.command_told = True
            elif not self.command_told:
                self.awaited = {(pid, processes[pid][2]) for pid in below}
        for pid in targets:
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def _signal_tree(self, signum: int) -> None:
        """bwrap's monitor leads the pod's group: a SIGTERM to it would kill bwrap at once
        and, by --die-with-parent, SIGKILL the pod with no grace. So the pod's own
        processes (bwrap's descendants) are signalled instead."""
        targets = descendants(self.pid)
        if not self.sandboxed:
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

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._signal_tree(signal.SIGKILL)
        self._cgroup_kill()

    def request_stop(self, grace: float) -> None:
        """SIGTERM now; SIGKILL once `grace` seconds have passed (the earliest deadline of
        several requests wins)."""
        if self.popen.poll() is not None:
            return
        now = time.monotonic()
        if self.stop_requested_at is None:
            self.stop_requested_at = now
            self.log.note(f"stopping: SIGTERM, then SIGKILL after {grace:g}s")
        self._terminate()
        deadline = now + max(grace, 0.0)
        self.kill_at = deadline if self.kill_at is None else min(self.kill_at, deadline)

    def tick(self) -> None:
        if self.stop_requested_at is not None and not self.command_told:
            processes = _processes()
            command = self._command(processes)
            alive = {(pid, start) for pid, (_, _, start) in processes.items()}
            if command is not None and not self.awaited & alive:
                self.command_told = True  # what it ran at the stop has exited
                try:
                    os.kill(command, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        if (
            self.kill_at is not None
            and time.monotonic() >= self.kill_at
            and self.popen.poll() is None
        ):
            self.log.note("grace period over: SIGKILL")
            self.kill()
            self.kill_at = float("inf")

    def _cgroup_kill(self) -> None:
        """Whatever of the pod escaped its process group, through its cgroup (the cgroup
        module is imported only here, at the end, to keep the shim small)."""
        group = self.spec.get("cgroup")
        if not group:
            return
        sys.path.insert(0, self.spec["base_dir"])
        from apps.agent import cgroups

        host = cgroups.CgroupHost(
            version=group["version"],
            root=Path(group["root"]),
            hierarchies={k: Path(v) for k, v in group["hierarchies"].items()},
        )
        host.group(group["name"]).kill_all()

    def finish(self) -> int:
        """After exit: sweep up leftovers, collect the last output, close the log."""
        code = exit_code(self.popen.wait())
        if not self.sandboxed:
            try:
                os.killpg(self.pid, signal.SIGKILL)  # background children outliving the shell
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self._cgroup_kill()
        except Exception as exc:  # the agent removes the group anyway: say so and go on
            self.log.note(f"could not empty the pod's cgroup: {exc}")
        deadline = time.monotonic() + 5
        while self.output >= 0 and time.monotonic() < deadline:
            self.drain(0.1)
        self.log.note(f"exited with code {code}")
        self.log.close()
        return code


def _stop_grace(state: Path) -> float | None:
    try:
        return float((state / STOP).read_text().strip() or 0)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return 0.0


def serve(state: Path) -> int:
    """Run the pod of STATE_DIR to its end; returns the shim's own exit status."""
    spec = read_json(state / SPEC)
    if spec is None:
        print(f"shim: no readable {SPEC} in {state}", file=sys.stderr)
        return 2
    stop_signal = {"term": False}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, lambda *_: None)  # only to wake the wait
    signal.signal(signal.SIGTERM, lambda *_: stop_signal.update(term=True))
    try:
        pod = Pod(spec)
    except OSError as exc:
        write_json(state / EXIT, {"code": None, "at": time.time(), "error": str(exc)})
        return 1
    started = {"shim": os.getpid(), "pid": pod.pid, "at": time.time()}
    told = _try_write(state / STARTED, started)
    seen_grace: float | None = None
    while pod.popen.poll() is None:
        if not told:  # the state's disk was full: again, while the agent waits for it
            told = _try_write(state / STARTED, started)
        grace = _stop_grace(state)
        if stop_signal["term"] and grace is None:
            grace = float(spec.get("grace", 30))
        if grace is not None and (seen_grace is None or grace < seen_grace):
            seen_grace = grace
            pod.request_stop(grace)
        pod.tick()
        pod.drain(TICK)
    # Said at once, before the last output is collected (seconds at most): until exit.json
    # is written the agent sees this shim alive, and must not vouch for the pod past this
    # file's time (runner.PodProcess.ending_since). The end is read after it, never before.
    _try_write(state / ENDING, {})
    ended = time.time()
    code = pod.finish()
    # The exit is the pod's outcome: never lost to a full disk. The agent sees this shim
    # alive and waits; once written, the pod ends with its real code and time.
    while not _try_write(state / EXIT, {"code": code, "at": ended}):
        time.sleep(1)
    return 0


def _try_write(path: Path, data: dict) -> bool:
    """`write_json`, or False when the disk refuses it (full, over a quota)."""
    try:
        write_json(path, data)
    except OSError:
        path.with_name(f".{path.name}.{os.getpid()}").unlink(missing_ok=True)
        return False
    return True


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: shim.py STATE_DIR", file=sys.stderr)
        sys.exit(2)
    os.umask(0o077)
    sys.exit(serve(Path(sys.argv[1])))
