"""The agent's side: start the pods this agent claims, watch them, report back.

Runs inside the Celery worker that `manage.py agent` starts (threads pool). `pod_start_task`
claims the pod and hands it to a supervisor thread of its own, which lives as long as the
pod: it starts the process (the thread is the process's parent, which --die-with-parent and
PR_SET_PDEATHSIG are tied to), then once a second re-reads the pod's status (a stop or a
preemption the stop task missed), the job's deadline (max running time) and, for rank 0,
the checkpoint manifest; when the process exits it reports the exit code.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.agent import runner, services

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0
EASYCKPT_DIR = Path(__file__).resolve().parent / "easyckpt"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class _Entry:
    launch: services.PodLaunch
    thread: threading.Thread | None = None
    process: runner.PodProcess | None = None
    stop_grace: float | None = None  # a stop that came before the process started
    done: threading.Event = field(default_factory=threading.Event)


_lock = threading.Lock()
_running: dict[str, _Entry] = {}
_shutting_down = threading.Event()
_agent = {"name": f"agent@{socket.gethostname()}"}


def agent_name() -> str:
    return _agent["name"]


def set_agent_name(name: str) -> None:
    _agent["name"] = name


def running_pods() -> list[str]:
    with _lock:
        return sorted(_running)


# --- the pod's directories, environment and sandbox ------------------------------------


@dataclass(frozen=True)
class PodPaths:
    job_dir: Path
    work_dir: Path
    checkpoint_dir: Path
    data_dir: Path
    log_path: Path


def pod_paths(*, job_id: str, pod_id: str) -> PodPaths:
    """POD_WORK_ROOT/<job>/<pod> is the pod's work dir; checkpoints/ and data/ beside it are
    the job's (shared by its pods and attempts); logs/ is written by the agent only."""
    job_dir = Path(settings.POD_WORK_ROOT) / job_id
    return PodPaths(job_dir=job_dir, work_dir=job_dir / pod_id,
                    checkpoint_dir=job_dir / "checkpoints", data_dir=job_dir / "data",
                    log_path=job_dir / "logs" / f"{pod_id}.log")


def _data_subdirs(data_sources: list) -> list[Path]:
    """Each data source's mount path, relative to /mnt/data."""
    found = []
    for i, source in enumerate(data_sources):
        mount = str((source or {}).get("mount_path") or f"/mnt/data/source-{i}")
        path = Path(mount)
        rel = path.relative_to(runner.DATA_MOUNT) if path.is_relative_to(runner.DATA_MOUNT) \
            else Path(path.name or f"source-{i}")
        if ".." not in rel.parts and str(rel) not in {"", "."}:
            found.append(rel)
    return found


def pod_env(launch: services.PodLaunch, paths: PodPaths, *, sandboxed: bool) -> dict[str, str]:
    """The pod's whole environment: nothing of the agent's own (no DATABASE_URL, no
    SECRET_KEY), the job's variables, then what a distributed job expects."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:{SYSTEM_PATH}",
        "HOME": str(paths.work_dir),
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({str(k): str(v) for k, v in launch.envs.items()})
    user_pythonpath = env.get("PYTHONPATH", "")
    env.update({
        "JOB_ID": launch.job_id,
        "POD_NAME": launch.pod_id,
        "ROLE": launch.role_type,
        "ROLE_INDEX": str(launch.index),
        "RANK": str(launch.rank),
        "WORLD_SIZE": str(launch.world_size),
        "MASTER_ADDR": launch.master_addr,
        "MASTER_PORT": str(launch.master_port),
        "CUDA_VISIBLE_DEVICES": launch.gpu_ids,
        "PAIWEB_ATTEMPT": str(launch.attempt),
        "PAIWEB_CHECKPOINT_DIR": str(paths.checkpoint_dir),
        "DATA_DIR": str(runner.DATA_MOUNT) if sandboxed else str(paths.data_dir),
        "PYTHONPATH": ":".join(p for p in (str(EASYCKPT_DIR), user_pythonpath) if p),
    })
    return env


def _hidden() -> tuple[Path, ...]:
    """What a sandboxed pod must not see: paiweb's var dir (SQLite, the Redis socket, other
    pods), its source and settings, the SQLite file wherever it is, the agent user's home."""
    hidden = {Path(settings.VAR_DIR), Path(settings.BASE_DIR), Path(settings.POD_WORK_ROOT),
              Path.home()}
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3") and not str(db["NAME"]).startswith(("file:", ":")):
        hidden.add(Path(os.path.realpath(db["NAME"])).parent)
    return tuple(sorted(p for p in hidden if p != Path("/")))


def _readable() -> tuple[Path, ...]:
    """Bound back read-only after hiding: the Python environment (pods run its python), the
    examples, and the EasyCkpt helper."""
    paths = [Path(sys.prefix), Path(sys.base_prefix), Path(settings.BASE_DIR) / "examples",
             EASYCKPT_DIR]
    return tuple(p for p in dict.fromkeys(paths) if p.exists())


def pod_spec(launch: services.PodLaunch, status: runner.SandboxStatus) -> runner.PodSpec:
    paths = pod_paths(job_id=launch.job_id, pod_id=launch.pod_id)
    for sub in _data_subdirs(launch.data_sources):
        (paths.data_dir / sub).mkdir(parents=True, exist_ok=True)
    return runner.PodSpec(
        name=launch.pod_id,
        command=launch.command,
        work_dir=paths.work_dir,
        log_path=paths.log_path,
        env=pod_env(launch, paths, sandboxed=status.sandboxed),
        sandbox=status.mode,
        writable=(paths.work_dir, paths.checkpoint_dir),
        readable=_readable(),
        hidden=_hidden(),
        data_dir=paths.data_dir,
        memory_mib=launch.memory_mib,
        log_max_bytes=settings.POD_LOG_MAX_BYTES,
    )


# --- starting, watching, stopping ---------------------------------------------------------


def pod_start(*, pod_id: str) -> bool:
    """Claim the pod and start supervising it in a thread of its own. False when there is
    nothing to start (claimed already, or stopped before it started)."""
    launch = services.pod_claim(pod_id=pod_id, agent=agent_name(),
                                hostname=socket.gethostname(), now=timezone.now())
    if launch is None:
        return False
    entry = _Entry(launch=launch)
    entry.thread = threading.Thread(target=_supervise, args=(entry,), name=f"pod-{pod_id}",
                                    daemon=True)
    with _lock:
        _running[pod_id] = entry
    entry.thread.start()
    return True


def pod_stop(*, pod_id: str, grace: float) -> bool:
    """SIGTERM the pod now, SIGKILL after `grace` seconds (its supervisor escalates)."""
    with _lock:
        entry = _running.get(pod_id)
        if entry is None:
            return False
        if entry.process is None:
            entry.stop_grace = grace
            return True
    entry.process.request_stop(grace)
    return True


def shutdown(*, grace_cap: float = 10.0) -> None:
    """The agent is stopping: stop its pods (grace capped) and wait for their reports."""
    _shutting_down.set()
    with _lock:
        entries = list(_running.values())
    for entry in entries:
        pod_stop(pod_id=entry.launch.pod_id, grace=min(entry.launch.grace, grace_cap))
    deadline = time.monotonic() + grace_cap + 5
    for entry in entries:
        entry.done.wait(timeout=max(deadline - time.monotonic(), 0))


def _supervise(entry: _Entry) -> None:
    try:
        _run(entry)
    except Exception:
        logger.exception("supervising pod %s failed", entry.launch.pod_id)
    finally:
        with _lock:
            _running.pop(entry.launch.pod_id, None)
        entry.done.set()
        connection.close()  # this thread's own connection


def _run(entry: _Entry) -> None:
    launch = entry.launch
    status = runner.sandbox_status(settings.SANDBOX)
    if settings.SANDBOX == "bwrap" and not status.sandboxed:
        services.pod_report_exit(pod_id=launch.pod_id, exit_code=None, now=timezone.now(),
                                 reason="SandboxUnavailable", message=status.detail)
        return
    spec = pod_spec(launch, status)
    paths = pod_paths(job_id=launch.job_id, pod_id=launch.pod_id)
    manifest = runner.ManifestReader(paths.checkpoint_dir) if launch.rank == 0 else None
    try:
        process = runner.start(spec)
    except OSError as exc:
        services.pod_report_exit(pod_id=launch.pod_id, exit_code=None, now=timezone.now(),
                                 reason="StartError", message=f"Could not start: {exc}")
        return
    with _lock:
        entry.process = process
        early_stop = entry.stop_grace
    if early_stop is not None:
        process.request_stop(early_stop)
    services.pod_report_running(pod_id=launch.pod_id, pid=process.pid, sandbox=status.mode,
                                work_dir=str(spec.work_dir), log_path=str(spec.log_path),
                                now=timezone.now())
    next_check = 0.0
    while process.wait(timeout=0.2) is None:
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + POLL_SECONDS
            _check(entry, process, manifest)
    code = process.finish()
    _report_checkpoints(launch, manifest)
    if _shutting_down.is_set():
        services.pod_report_exit(pod_id=launch.pod_id, exit_code=code, now=timezone.now(),
                                 reason="AgentStopped",
                                 message=f"Stopped with its agent {agent_name()} (exit code "
                                         f"{code})")
    else:
        services.pod_report_exit(pod_id=launch.pod_id, exit_code=code, now=timezone.now())


def _check(entry: _Entry, process: runner.PodProcess, manifest) -> None:
    """Once a second: checkpoints, and whether the pod should still run."""
    launch = entry.launch
    try:
        _report_checkpoints(launch, manifest)
        watch = services.pod_watch(pod_pk=launch.pod_pk)
        if watch is None or watch.status not in services.LIVE:
            if process.stop_requested_at is None:
                process.request_stop(launch.grace)  # stopped, preempted or failed elsewhere
        elif watch.deadline is not None and timezone.now() >= watch.deadline:
            services.job_timeout(job_pk=launch.job_pk, now=timezone.now())
    except Exception:  # a busy database must not kill the supervisor; try again next second
        logger.exception("checking pod %s failed", launch.pod_id)


def _report_checkpoints(launch: services.PodLaunch, manifest) -> None:
    if manifest is None:
        return
    for entry in manifest.new_entries():
        services.checkpoint_report(
            job_pk=launch.job_pk, step=entry["step"],
            path=str(manifest.path.parent / entry["file"]), size_bytes=entry["bytes"],
            at=datetime.fromtimestamp(entry["time"], tz=UTC),
        )
