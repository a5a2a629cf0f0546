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

from apps.agent import cgroups, housekeeping, netns, runner, services

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
    reported: bool = False  # its exit was reported
    over_quota: str = ""  # the disk watchdog stopped it: why
    next_disk_check: float = 0.0


_lock = threading.Lock()
_running: dict[str, _Entry] = {}
_shutting_down = threading.Event()
_agent = {"name": f"agent@{socket.gethostname()}"}


def agent_name() -> str:
    return _agent["name"]


def set_agent_name(name: str) -> None:
    _agent["name"] = name
    _agent["serving"] = name


def is_agent() -> bool:
    """Whether this worker runs pods (it was named by an agent's start)."""
    return "serving" in _agent


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


def _readable() -> tuple[Path, ...]:
    """Bound in read-only: the Python environments (pods run the agent's python and its
    packages), the example workloads (not the cluster file beside them) and EasyCkpt."""
    examples = sorted((Path(settings.BASE_DIR) / "examples").glob("*.py"))
    paths = [Path(sys.prefix), Path(sys.base_prefix), *examples, EASYCKPT_DIR]
    return tuple(p for p in dict.fromkeys(paths) if p.exists())


def pod_uid(isolation: runner.Isolation, job_pk: int) -> int:
    """The job's own uid and gid on this host (the same on every host, so files and
    processes of two jobs never share an owner); 0 when the agent cannot switch users."""
    return settings.POD_UID_BASE + job_pk if isolation.root else 0


def _prepare_dirs(launch: services.PodLaunch, paths: PodPaths, uid: int) -> None:
    """The pod's directories, owned by its uid, made without following any link a pod of
    this job may have planted in them (they are the pod's to write: hostile)."""
    root = Path(settings.POD_WORK_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    owner = uid or -1
    runner.ensure_dir(paths.job_dir, under=root)
    runner.ensure_dir(paths.log_path.parent, under=paths.job_dir)
    for path in (paths.work_dir, paths.checkpoint_dir, paths.data_dir):
        runner.ensure_dir(path, under=paths.job_dir, uid=owner)
    for sub in _data_subdirs(launch.data_sources):
        runner.ensure_dir(paths.data_dir / sub, under=paths.data_dir, uid=owner)


def _cgroup_prefix() -> str:
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in agent_name())
    return f"paiweb/{slug}"


def pod_spec(launch: services.PodLaunch, isolation: runner.Isolation, *,
             cgroup=None, netns_name: str = "") -> runner.PodSpec:
    paths = pod_paths(job_id=launch.job_id, pod_id=launch.pod_id)
    uid = pod_uid(isolation, launch.job_pk)
    _prepare_dirs(launch, paths, uid)
    return runner.PodSpec(
        name=launch.pod_id,
        command=launch.command,
        work_dir=paths.work_dir,
        log_path=paths.log_path,
        env=pod_env(launch, paths, sandboxed=isolation.bwrap is not None),
        isolation=isolation,
        writable=(paths.work_dir, paths.checkpoint_dir),
        readable=_readable(),
        data_dir=paths.data_dir,
        uid=uid,
        netns=netns_name,
        cgroup=cgroup,
        memory_mib=launch.memory_mib,
        file_size_max=settings.POD_DISK_QUOTA_MIB * runner.MIB,
        tmp_mib=settings.POD_TMP_MIB,
        shm_mib=settings.POD_SHM_MIB,
        gpu_ids=launch.gpu_ids,
        log_max_bytes=settings.POD_LOG_MAX_BYTES,
    )


# --- the job's network namespace and the pod's cgroup ----------------------------------


_netns_users: dict[str, int] = {}
_network = {"prepared": False}


def _host_key() -> str:
    """What tells this host's namespaces from another's where hosts share /run/netns."""
    return os.environ.get("PAIWEB_AGENT_ADDRESS", "")


def network_sync(networks: list[tuple[str, str]] | None = None) -> None:
    """With POD_CIDR: the host's forwarding and nftables base, and a route to every other
    host's pod subnet (`networks`, else read from the heartbeats). Called at the agent's
    start, at each heartbeat and before a job's namespace is linked."""
    if not settings.POD_CIDR or os.geteuid() != 0:
        return
    try:
        with _lock:
            if not _network["prepared"]:
                netns.host_prepare()
                if settings.POD_EGRESS:
                    netns.egress_prepare(settings.POD_CIDR)
                _network["prepared"] = True
        if networks is None:
            networks = services.pod_networks()
        netns.routes_sync([(cidr, via) for cidr, via in networks
                           if cidr != settings.POD_CIDR and via])
    except Exception:
        logger.exception("could not set up routes between hosts' pod subnets")


def _netns_acquire(launch: services.PodLaunch) -> str:
    name = netns.name_for(launch.job_id, _host_key())
    peers: list[str] = []
    if settings.POD_CIDR:
        networks = services.pod_networks()
        network_sync(networks)
        peers = [netns.job_address(cidr, launch.job_pk) for cidr, _ in networks
                 if cidr != settings.POD_CIDR]
    with _lock:
        netns.ensure(name)
        if settings.POD_CIDR:
            netns.connect(name, job_pk=launch.job_pk,
                          address=netns.job_address(settings.POD_CIDR, launch.job_pk),
                          peers=peers, egress=settings.POD_EGRESS)
        _netns_users[name] = _netns_users.get(name, 0) + 1
    return name


def _netns_delete_unused(name: str, job_pk: int | None = None) -> None:
    """Delete a namespace no process is in (another agent's sandbox on this host may still
    use it), and the job's link rules with it. The caller holds _lock."""
    try:
        if not netns.in_use(name):
            netns.delete(name)
            if settings.POD_CIDR and job_pk is not None:
                netns.disconnect(job_pk)
    except Exception:
        logger.exception("could not delete network namespace %s", name)


def _netns_release(name: str, job_pk: int) -> None:
    """Delete the job's namespace once no pod of it runs here."""
    with _lock:
        _netns_users[name] = _netns_users.get(name, 1) - 1
        if _netns_users[name] > 0:
            return
        _netns_users.pop(name, None)
        _netns_delete_unused(name, job_pk)


def _cgroup_create(launch: services.PodLaunch) -> cgroups.PodCgroup | None:
    host = runner.cgroup_host()
    if host is None:
        return None
    limits = cgroups.Limits(memory_bytes=launch.memory_mib * runner.MIB,
                            pids=settings.POD_PIDS_MAX, cpu_millicores=launch.cpu_millicores)
    return host.create(f"{_cgroup_prefix()}/{launch.pod_id}", limits)


def release_host() -> None:
    """At the agent's stop, once its pods are reported: its (now empty) cgroup parent."""
    host = runner.cgroup_host()
    if host is None:
        return
    for hierarchy in host.directories():
        try:
            (hierarchy / _cgroup_prefix()).rmdir()
        except OSError:
            pass  # a pod still running there, or gone already


def sweep_leftovers() -> None:
    """At the agent's start: cgroups of this agent's pods from before a crash, and network
    namespaces of paiweb that no process uses any more."""
    host = runner.cgroup_host()
    if host is not None:
        with _lock:
            keep = {f"{_cgroup_prefix()}/{pod_id}" for pod_id in _running}
        try:
            cgroups.sweep(host, _cgroup_prefix(), keep)
        except Exception:
            logger.exception("could not sweep leftover cgroups")
    if os.geteuid() == 0:
        for name in netns.names():
            with _lock:
                if name not in _netns_users:
                    _netns_delete_unused(name)


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
        if not entry.reported:  # never leave a pod Running with nobody watching it
            _report_exit(entry, None, reason="AgentError",
                         message="The agent failed while supervising this pod (see its log)")
    finally:
        with _lock:
            _running.pop(entry.launch.pod_id, None)
            if not any(e.launch.job_pk == entry.launch.job_pk for e in _running.values()):
                _disk_seen.pop(entry.launch.job_pk, None)
        entry.done.set()
        connection.close()  # this thread's own connection


def _report_exit(entry: _Entry, code: int | None, *, reason: str = "", message: str = "") -> None:
    entry.reported = True
    services.pod_report_exit(pod_id=entry.launch.pod_id, exit_code=code, now=timezone.now(),
                             reason=reason, message=message)


def _run(entry: _Entry) -> None:
    launch = entry.launch
    isolation = runner.isolation_status(settings.SANDBOX)
    if not isolation.can_run:
        _report_exit(entry, None, reason="SandboxUnavailable",
                     message=f"This host cannot isolate pods: {isolation.detail}")
        return
    netns_name, cgroup = "", None
    try:
        if isolation.netns and isolation.bwrap:  # insecure mode still uses what it has
            netns_name = _netns_acquire(launch)
        cgroup = _cgroup_create(launch)
        spec = pod_spec(launch, isolation, cgroup=cgroup, netns_name=netns_name)
        process = runner.start(spec)
    except Exception as exc:
        logger.exception("could not start pod %s", launch.pod_id)
        _release(cgroup, netns_name, launch.job_pk)
        _report_exit(entry, None, reason="StartError", message=f"Could not start: {exc}")
        return
    try:
        _watch(entry, process, spec, isolation)
    finally:
        code = process.finish() if process.poll() is not None else _kill(process)
        reason, message = _exit_reason(entry, spec, code)
        _release(cgroup, netns_name, launch.job_pk)
    if _shutting_down.is_set() and not reason:
        reason, message = "AgentStopped", (f"Stopped with its agent {agent_name()} "
                                           f"(exit code {code})")
    _report_exit(entry, code, reason=reason, message=message)


def _kill(process: runner.PodProcess) -> int:
    process.kill()
    return process.finish()


def _release(cgroup, netns_name: str, job_pk: int) -> None:
    if cgroup is not None:
        try:
            cgroup.remove()
        except Exception:
            logger.exception("could not remove cgroup %s", cgroup)
    if netns_name:
        _netns_release(netns_name, job_pk)


def _watch(entry: _Entry, process: runner.PodProcess, spec: runner.PodSpec,
           isolation: runner.Isolation) -> None:
    launch = entry.launch
    paths = pod_paths(job_id=launch.job_id, pod_id=launch.pod_id)
    manifest = runner.ManifestReader(paths.checkpoint_dir) if launch.rank == 0 else None
    with _lock:
        entry.process = process
        early_stop = entry.stop_grace
    if early_stop is not None:
        process.request_stop(early_stop)
    services.pod_report_running(pod_id=launch.pod_id, pid=process.pid, sandbox=isolation.mode,
                                work_dir=str(spec.work_dir), log_path=str(spec.log_path),
                                now=timezone.now())
    if not isolation.complete:
        logger.warning("pod %s runs INSECURELY: %s", launch.pod_id, isolation.detail)
        services.pod_event(pod_pk=launch.pod_pk, kind="InsecureSandbox", now=timezone.now(),
                           message=f"This pod is not isolated from the host: "
                                   f"{isolation.detail} (SANDBOX=insecure)")
    next_check = 0.0
    while process.wait(timeout=0.2) is None:
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + POLL_SECONDS
            _check(entry, process, manifest, paths)
    _report_checkpoints(launch, manifest)


def _exit_reason(entry: _Entry, spec: runner.PodSpec, code: int) -> tuple[str, str]:
    """Why the kernel or the watchdog ended a pod, in words its user understands."""
    quota = settings.POD_DISK_QUOTA_MIB
    if entry.over_quota:
        return "DiskQuotaExceeded", entry.over_quota
    if code == runner.SIGXFSZ_EXIT:
        return "DiskQuotaExceeded", (f"A file grew past the disk quota of {quota} MiB "
                                     f"(exit code {code})")
    outcome = ""
    if spec.cgroup is not None and code != 0:
        try:
            outcome = spec.cgroup.outcome(code)
        except OSError:
            outcome = ""
    if outcome == "OOMKilled":
        return "OOMKilled", (f"Killed for using more than its memory limit of "
                             f"{spec.memory_mib} MiB (exit code {code})")
    if outcome == "TooManyProcesses":
        return "TooManyProcesses", (f"Hit its limit of {settings.POD_PIDS_MAX} processes "
                                    f"and threads (exit code {code})")
    return "", ""


def _check(entry: _Entry, process: runner.PodProcess, manifest, paths: PodPaths) -> None:
    """Once a second: checkpoints, disk use, and whether the pod should still run."""
    launch = entry.launch
    try:
        _report_checkpoints(launch, manifest)
        if time.monotonic() >= entry.next_disk_check:
            entry.next_disk_check = time.monotonic() + settings.POD_DISK_CHECK_SECONDS
            _check_disk(entry, process, paths)
        watch = services.pod_watch(pod_pk=launch.pod_pk)
        if watch is None or watch.status not in services.LIVE:
            if process.stop_requested_at is None:
                process.request_stop(launch.grace)  # stopped, preempted or failed elsewhere
        elif watch.deadline is not None and timezone.now() >= watch.deadline:
            services.job_timeout(job_pk=launch.job_pk, now=timezone.now())
    except Exception:  # a busy database must not kill the supervisor; try again next second
        logger.exception("checking pod %s failed", launch.pod_id)


_disk_seen: dict[int, tuple[float, housekeeping.DiskUsage]] = {}


def _job_disk_usage(job_pk: int, job_dir: Path) -> housekeeping.DiskUsage:
    """The job's disk use here: one walk of its directory per check period, whichever of
    its pods on this host asks first (the others reuse it), reported on the job."""
    now = time.monotonic()
    with _lock:
        seen = _disk_seen.get(job_pk)
    if seen is not None and now - seen[0] < settings.POD_DISK_CHECK_SECONDS:
        return seen[1]
    usage = housekeeping.disk_usage(job_dir, max_entries=settings.POD_MAX_FILES + 1)
    with _lock:
        _disk_seen[job_pk] = (now, usage)
    housekeeping.job_disk_report(job_pk=job_pk, bytes=usage.bytes, now=timezone.now())
    return usage


def _check_disk(entry: _Entry, process: runner.PodProcess, paths: PodPaths) -> None:
    """The disk quota: the job's files on this host (its pods' work dirs, checkpoints, data
    and logs). Over it, in bytes or in files, the pod is stopped at once: DiskQuotaExceeded.
    The figure is also the job's disk use on its page."""
    quota, max_files = settings.POD_DISK_QUOTA_MIB * runner.MIB, settings.POD_MAX_FILES
    usage = _job_disk_usage(entry.launch.job_pk, paths.job_dir)
    if entry.over_quota:
        return
    if usage.bytes > quota:
        entry.over_quota = (f"The job's files on this host use {usage.bytes / runner.MIB:,.0f} "
                            f"MiB, more than the disk quota of "
                            f"{settings.POD_DISK_QUOTA_MIB:,} MiB")
    elif not usage.complete or usage.files > max_files:
        entry.over_quota = (f"The job created more than {max_files:,} files on this host (the "
                            "disk quota's file limit)")
    if entry.over_quota:
        process.log.note(f"disk quota exceeded: {entry.over_quota}")
        process.request_stop(0)


def _report_checkpoints(launch: services.PodLaunch, manifest) -> None:
    if manifest is None:
        return
    for entry in manifest.new_entries():
        services.checkpoint_report(
            job_pk=launch.job_pk, step=entry["step"],
            path=str(manifest.path.parent / entry["file"]), size_bytes=entry["bytes"],
            at=datetime.fromtimestamp(entry["time"], tz=UTC),
        )
    while manifest.problems:
        services.pod_event(pod_pk=launch.pod_pk, kind="CheckpointManifestInvalid",
                           message=manifest.problems.pop(0), now=timezone.now())
