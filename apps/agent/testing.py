"""A real node agent in a subprocess, for the tests and the latency benchmark.

`AgentProcess` runs `manage.py agent` against the caller's database (the test database,
which on SQLite is a file: see DATABASES TEST NAME in settings) and Redis, waits until it
answers, and always stops it: SIGTERM (the agent stops its pods: AGENT_STOP_PODS_ON_EXIT is
on unless the caller's env says otherwise), then SIGKILL to its whole process group, then to
any pod shim still running (each is in a session of its own, so it outlives the agent).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from django.conf import settings


def database_url(settings_dict: dict) -> str:
    """A DATABASE_URL for the database a Django connection is using."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        name = str(settings_dict["NAME"])
        if name.startswith(("file:", ":memory:")) or not name:
            raise RuntimeError("the SQLite database is in memory: a subprocess cannot share it")
        return f"sqlite:///{os.path.realpath(name)}"
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{quote(settings_dict['NAME'], safe='')}"


class AgentProcess:
    """`with AgentProcess(database=..., redis_url=...) as agent:` — a running agent."""

    def __init__(
        self,
        *,
        database: dict,
        redis_url: str,
        nodes: str = "all",
        pod_work_root: Path | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        concurrency: int = 4,
        name: str | None = None,
        var_dir: Path | None = None,
    ) -> None:
        # short: may hold sockets; shared by the agents of one name to play a restart
        self.var_dir = var_dir or Path(tempfile.mkdtemp(prefix="pw-agent-"))
        self.pod_work_root = pod_work_root or self.var_dir / "pods"
        self.log_path = log_path or self.var_dir / f"agent-{uuid.uuid4().hex[:6]}.log"
        self.prefix = name or f"agent-{uuid.uuid4().hex[:8]}"
        self.name = f"{self.prefix}@{socket.gethostname()}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "paiweb.settings",
            "DATABASE_URL": database_url(database),
            "REDIS_URL": redis_url,
            "PAIWEB_VAR_DIR": str(self.var_dir),
            "POD_WORK_ROOT": str(self.pod_work_root),
            "EXECUTION_BACKEND": "agent",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "PYTHONUNBUFFERED": "1",
            "AGENT_STOP_PODS_ON_EXIT": "true",
            # DEBUG is off unless set: a test agent, also outside pytest (the benchmarks),
            # runs as in development unless the caller says otherwise
            "DEBUG": os.environ.get("DEBUG") or "true",
            **(env or {}),
        }
        self.argv = [
            sys.executable,
            "manage.py",
            "agent",
            "--nodes",
            nodes,
            "--name",
            f"{self.prefix}@%h",
            "--concurrency",
            str(concurrency),
        ]
        self.process: subprocess.Popen | None = None

    def start(self, *, timeout: float = 30.0) -> AgentProcess:
        with self.log_path.open("wb") as out:
            self.process = subprocess.Popen(
                self.argv,
                cwd=settings.BASE_DIR,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the agent exited with code {self.process.returncode}:\n{self.log()}"
                )
            if self.answers(timeout=0.5):
                return self
        self.stop()
        raise RuntimeError(f"the agent did not answer within {timeout:.0f}s:\n{self.log()}")

    def answers(self, *, timeout: float) -> bool:
        from paiweb.celery import app

        return bool(app.control.ping(destination=[self.name], timeout=timeout))

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except FileNotFoundError:
            return ""

    def stop(self, *, timeout: float = 20.0) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            process.wait()
        self.kill_shims()
        self.delete_namespaces()

    def shims(self) -> list[int]:
        """The pids of this agent's pod shims that still run."""
        from apps.agent.runner import running_shims

        return running_shims(self.var_dir / "agent")

    def kill_shims(self) -> None:
        """SIGKILL every shim left (its pod dies with it: --die-with-parent, pdeathsig)."""
        for pid in self.shims():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def delete_namespaces(self) -> None:
        """The job namespaces its pods left that no process is in (a shim killed with its
        pod leaves its job's), as its next start would sweep them: the caller's database is
        gone by then. Only where the caller can read that database."""
        if os.geteuid() != 0:
            return
        from apps.agent import netns, supervisor

        try:
            names = supervisor.own_namespaces(self.env.get("PAIWEB_AGENT_ADDRESS", ""))
        except Exception:  # no database access here (a module's teardown): nothing to tell
            return
        deadline = time.monotonic() + 5  # the pods of the shims just killed are dying
        for name in names:
            while netns.in_use(name) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not netns.in_use(name):
                netns.delete(name)

    def cleanup(self) -> None:
        shutil.rmtree(self.var_dir, ignore_errors=True)

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
