"""A real `manage.py demo` in a subprocess, for the tests and the fault-injection runs.

`DemoProcess` starts the whole console (web, worker, beat, agent, Flower and, unless
REDIS_URL is given, an embedded Redis) on a directory of its own, reads its output, runs
`manage.py` commands and Python against the same settings, and stops it with Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from django.conf import settings

BASE_DIR = Path(settings.BASE_DIR)
# What the caller's environment must not decide for the demo.
OWN = (
    "SECRET_KEY",
    "ACCESS_KEY_ENCRYPTION_SECRET",
    "DEBUG",
    "PAIWEB_VAR_DIR",
    "DATABASE_URL",
    "REDIS_URL",
    "EXECUTION_BACKEND",
    "CELERY_TASK_ALWAYS_EAGER",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DemoProcess:
    """`manage.py demo` on `var` (a new temporary directory if None) with its own ports;
    `env` on top of the caller's environment (DATABASE_URL, REDIS_URL… are the demo's
    own unless given there)."""

    def __init__(
        self, *, var: Path | None = None, backend: str = "none", env: dict[str, str] | None = None
    ) -> None:
        self.var = var or Path(tempfile.mkdtemp(prefix="pw-demo-", dir="/tmp"))
        self.port, self.flower = _free_port(), _free_port()
        self.env = {k: v for k, v in os.environ.items() if k not in OWN}
        self.env.update(
            PAIWEB_VAR_DIR=str(self.var),
            DJANGO_SETTINGS_MODULE="paiweb.settings",
            PORT=str(self.port),
            FLOWER_PORT=str(self.flower),
            EXECUTION_BACKEND=backend,
            PYTHONUNBUFFERED="1",
            SCHEDULER_REQUEUE_BACKOFF_SECONDS="0",
            # a development demo, also outside pytest (the fault runs): its
            # migrate and commands get the generated key as the demo does
            DEBUG="true",
        )
        self.env.update(env or {})
        self.manage("migrate", "--noinput")
        if backend == "agent":
            self.manage("apply_cluster", "examples/demo-cluster.toml")
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "demo"],
            cwd=BASE_DIR,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, *, after: int = 0, timeout: float = 90) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines[after:]:
                if found := re.search(pattern, line):
                    return found
            time.sleep(0.1)
        raise AssertionError(
            f"no line matching {pattern!r} within {timeout:.0f}s:\n" + "\n".join(self.lines[-60:])
        )

    def manage(self, *argv: str, timeout: float | None = 120) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def python(self, code: str, *, timeout: float | None = 120) -> dict:
        """Run `code` in the demo's Django (manage.py shell); it prints one JSON object."""
        out = self.manage("shell", "-c", code, timeout=timeout)
        return json.loads(out.strip().splitlines()[-1])

    def pids(self) -> dict[str, int]:
        """Each child's latest pid, from the demo's "started <name> (pid N)" lines."""
        return {
            name: int(pid)
            for name, pid in re.findall(r"started (\w+) \(pid (\d+)\)", "\n".join(self.lines))
        }

    def kill_shims(self) -> int:
        """SIGKILL the pod shims still running under this demo's agent (their pods die with
        them); how many there were."""
        from apps.agent.runner import running_shims

        pids = running_shims(self.var / "agent")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return len(pids)

    def healthz(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
            return r.status

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode
