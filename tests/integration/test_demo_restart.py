"""`manage.py demo` keeps the console up: a child that dies is started again, alone, with a
backoff, and says so. A real demo on its own ports, SQLite file and embedded Redis."""

from __future__ import annotations

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
OWN = ("SECRET_KEY", "ACCESS_KEY_ENCRYPTION_SECRET", "DEBUG", "PAIWEB_VAR_DIR", "DATABASE_URL",
       "REDIS_URL", "EXECUTION_BACKEND", "CELERY_TASK_ALWAYS_EAGER")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Demo:
    def __init__(self) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="pw-demo-", dir="/tmp"))
        self.port, self.flower = _free_port(), _free_port()
        self.env = {k: v for k, v in os.environ.items() if k not in OWN}
        self.env.update(PAIWEB_VAR_DIR=str(self.var), DJANGO_SETTINGS_MODULE="paiweb.settings",
                        PORT=str(self.port), FLOWER_PORT=str(self.flower),
                        EXECUTION_BACKEND="none", PYTHONUNBUFFERED="1")
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=BASE_DIR,
                       env=self.env, check=True, capture_output=True, timeout=120)
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "demo"], cwd=BASE_DIR, env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
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
        raise AssertionError(f"no line matching {pattern!r} within {timeout:.0f}s:\n"
                             + "\n".join(self.lines[-60:]))

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


def test_a_child_that_dies_is_restarted_alone_and_the_console_stays_up():
    demo = Demo()
    try:
        demo.wait_for(r"paiweb demo is running")
        pids = {name: int(pid) for name, pid in
                re.findall(r"started (\w+) \(pid (\d+)\)", "\n".join(demo.lines))}
        assert {"worker", "beat", "web", "flower", "redis"} <= set(pids), pids
        mark = len(demo.lines)
        os.kill(pids["beat"], signal.SIGKILL)
        demo.wait_for(r"beat exited with code -9: restarting it in 1s \(restart 1 in a row\); "
                      r"the others keep running", after=mark)
        again = int(demo.wait_for(r"started beat \(pid (\d+)\)", after=mark).group(1))
        assert again != pids["beat"]
        mark = len(demo.lines)
        os.kill(again, signal.SIGKILL)  # dies again at once: the backoff doubles
        demo.wait_for(r"beat exited with code -9: restarting it in 2s \(restart 2 in a row\)",
                      after=mark)
        demo.wait_for(r"started beat \(pid \d+\)", after=mark)
        for name in ("worker", "web", "flower", "redis"):  # untouched
            os.kill(pids[name], 0)
        assert demo.healthz() == 200
        assert not any("stopping the others" in line for line in demo.lines)
    finally:
        code = demo.stop()
    assert code == 0, "\n".join(demo.lines[-40:])
    assert "all stopped" in demo.lines[-1] or any("all stopped" in x for x in demo.lines[-5:])
