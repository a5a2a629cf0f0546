"""The agent's side: run the pods this agent should run, watch them, report back.

Runs inside the Celery worker that `manage.py agent` starts (threads pool). Each pod runs
under a shim of its own (apps/agent/shim.py), a small process that outlives the agent: an
agent restart or upgrade does not touch a running pod, and the next agent of the same name
re-adopts it from the shim's state directory (AGENT_STATE_DIR). A fixed number of threads,
and so of database connections, whatever the number of pods:

- `pod_start_task`, on the worker's pool: claim a pod, prepare its network namespace, cgroup
  and directories, start its shim. The broker message is only a hint that makes this fast.
- The reconcile loop, every AGENT_RECONCILE_SECONDS, compares what the database says this
  agent should run with what runs: it starts the queued pods whose message never came (a
  broker that lost it, an embedded Redis restarted), re-adopts the pods an earlier agent of
  this name started, and queues again a claim whose process never started.
- The watch loop, once a second for all pods in one query: exits (reported with the exit
  code and the time the process ended, so a bill stops then), status (a stop or preemption
  whose message was missed), the job's deadline, checkpoint manifests and the disk quota;
  and every POD_METRICS_SECONDS each pod's figures (CPU, memory, GPU, network, disk), all
  stored in one insert. When its last complete round began goes with the heartbeats
  (`pods_watched_at`): billing bills no pod past it.
- The disk walker measures each running job's files every POD_DISK_CHECK_SECONDS, off the
  watch loop (a large tree takes a second), and hands the figure to it.

A report that fails (the database is down) is kept and tried again the next second.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.agent import cgroups, housekeeping, metrics, netns, runner, sampler, services, shim
from apps.core.words import say
from apps.jobs.models import LIVE_POD_STATUSES

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0
EASYCKPT_DIR = Path(__file__).resolve().parent / "easyckpt"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class _Entry:
    """A pod this agent runs (or re-adopted), until its exit is reported."""

    launch: services.PodLaunch
    process: runner.PodProcess
    paths: PodPaths
    cgroup: cgroups.PodCgroup | None = None
    netns_name: str = ""
    sandbox: str = ""
    running_reported: bool = False
    manifest: runner.ManifestReader | None = None
    over_quota: str = ""  # the disk watchdog stopped it: why
    next_disk_check: float = 0.0
    disk_measured: float = 0.0  # when the walk of the disk figure last applied began
    stopped_by_agent: bool = False  # the agent's own stop (AGENT_STOP_PODS_ON_EXIT)
    exit: runner.Exit | None = None  # it ended; the report may still be due
    log_mtime: int = 0  # its log's modification time (ns) when last looked at
    output_reported: float = 0.0  # the log's growth last reported (its time, epoch seconds)
    ending: tuple[str, str] | None = None  # (reason, message), once released
    metrics_reading: metrics.Reading | None = None  # its last metrics reading


_lock = threading.Lock()
_running: dict[str, _Entry] = {}
_starting: dict[str, float | None] = {}  # claimed, no process yet → a stop's grace, if any
_starts_began: dict[str, float] = {}  # the same pods → when their start began (epoch)
# "at": when the last complete watch round began (epoch; `pods_watched_at`); "adopted":
# whether a reconcile has re-adopted every pod an earlier agent of this name left.
_watched: dict = {"at": None, "adopted": False}
_shutting_down = threading.Event()
_loops_stop = threading.Event()
_loops: list[threading.Thread] = []
_agent: dict = {"name": f"agent@{socket.gethostname()}", "queues": ()}


def agent_name() -> str:
    return _agent["name"]


def set_agent_name(name: str, queues: tuple[str, ...] = ()) -> None:
    """This worker is the agent `name`, consuming `queues` (its nodes' and "public")."""
    _agent["name"] = name
    _agent["serving"] = name
    _agent["queues"] = tuple(queues)


def is_agent() -> bool:
    """Whether this worker runs pods (it was named by an agent's start)."""
    return "serving" in _agent


def running_pods() -> list[str]:
    with _lock:
        return sorted(_running)


def pods_watched_at() -> float | None:
    """When this agent's last complete watch round began (epoch seconds): every pod it runs
    that had ended by then has had its end reported. Reported with its heartbeats; billing
    bills a running pod no further (`apps.jobs.execution.pods_vouched_until`). None until
    the first such round, which follows the re-adoption of the pods an earlier agent left:
    a restarted agent vouches for nothing new until it has looked at them."""
    return _watched["at"]


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
    return PodPaths(
        job_dir=job_dir,
        work_dir=job_dir / pod_id,
        checkpoint_dir=job_dir / "checkpoints",
        data_dir=job_dir / "data",
        log_path=job_dir / "logs" / f"{pod_id}.log",
    )


def _data_subdirs(data_sources: list) -> list[Path]:
    """Each data source's mount path, relative to /mnt/data."""
    found = []
    for i, source in enumerate(data_sources):
        mount = str((source or {}).get("mount_path") or f"/mnt/data/source-{i}")
        path = Path(mount)
        rel = (
            path.relative_to(runner.DATA_MOUNT)
            if path.is_relative_to(runner.DATA_MOUNT)
            else Path(path.name or f"source-{i}")
        )
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
    env.update(
        {
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
        }
    )
    return env


def _readable() -> tuple[Path, ...]:
    """Bound in read-only: the Python environments (pods run the agent's python and its
    packages), the example workloads (not the cluster file beside them) and EasyCkpt."""
    examples = sorted((Path(settings.BASE_DIR) / "examples").glob("*.py"))
    paths = [Path(sys.prefix), Path(sys.base_prefix), *examples, EASYCKPT_DIR]
    return tuple(p for p in dict.fromkeys(paths) if p.exists())


def _hidden() -> tuple[Path, ...]:
    """paiweb's own files, which no pod may see even where a system directory holds them
    (runner.PodSpec.hidden): the source tree, var/, the work root, the agents' state, and
    the SQLite database file wherever it is."""
    paths = [
        Path(settings.BASE_DIR),
        Path(settings.VAR_DIR),
        Path(settings.POD_WORK_ROOT),
        Path(settings.AGENT_STATE_DIR),
    ]
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3") and str(database["NAME"]).startswith("/"):
        paths.append(Path(database["NAME"]))
    return tuple(paths)


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


def _agent_slug() -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in agent_name())


def _cgroup_prefix() -> str:
    """This agent's parent group: its name and its installation (its state directory), so
    that two installations on one host (two demos, a test beside a demo), whose agents may
    share a name, never sweep each other's pods."""
    installation = hashlib.sha256(str(state_root()).encode()).hexdigest()[:8]
    return f"paiweb/{_agent_slug()}-{installation}"


def pod_spec(
    launch: services.PodLaunch, isolation: runner.Isolation, *, cgroup=None, netns_name: str = ""
) -> runner.PodSpec:
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
        hidden=_hidden(),
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
        netns.routes_sync(
            [(cidr, via) for cidr, via in networks if cidr != settings.POD_CIDR and via]
        )
    except Exception:
        logger.exception("could not set up routes between hosts' pod subnets")


def _netns_acquire(launch: services.PodLaunch) -> str:
    name = netns.name_for(launch.job_id, _host_key())
    peers: list[str] = []
    if settings.POD_CIDR:
        networks = services.pod_networks()
        network_sync(networks)
        peers = [
            netns.job_address(cidr, launch.job_pk)
            for cidr, _ in networks
            if cidr != settings.POD_CIDR
        ]
    with _lock:
        netns.ensure(name)
        if settings.POD_CIDR:
            netns.connect(
                name,
                address=netns.job_address(settings.POD_CIDR, launch.job_pk),
                peers=peers,
                egress=settings.POD_EGRESS,
            )
        _netns_users[name] = _netns_users.get(name, 0) + 1
    return name


def _netns_delete_unused(name: str) -> None:
    """Delete a namespace no process is in (another agent's sandbox on this host may still
    use it), and its link's rules with it. The caller holds _lock."""
    try:
        if not netns.in_use(name):
            if settings.POD_CIDR:  # first: the link then goes at once, not in the background
                netns.disconnect(name)
            netns.delete(name)
    except Exception:
        logger.exception("could not delete network namespace %s", name)


def _netns_release(name: str) -> None:
    """Delete the job's namespace once no pod of it runs here."""
    with _lock:
        _netns_users[name] = _netns_users.get(name, 1) - 1
        if _netns_users[name] > 0:
            return
        _netns_users.pop(name, None)
        _netns_delete_unused(name)


def _cgroup_create(launch: services.PodLaunch) -> cgroups.PodCgroup | None:
    host = runner.cgroup_host()
    if host is None:
        return None
    limits = cgroups.Limits(
        memory_bytes=launch.memory_mib * runner.MIB,
        pids=settings.POD_PIDS_MAX,
        cpu_millicores=launch.cpu_millicores,
    )
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
    """At the agent's start, after re-adopting: cgroups of this agent's pods that no shim
    runs any more, the network namespaces of this installation's jobs on this host that no
    process uses, and (with POD_CIDR) the link rules of namespaces gone (`netns.sweep_rules`)."""
    host = runner.cgroup_host()
    if host is not None:
        root = state_root()
        with _lock:  # the pods it runs, and any a shim may still run (not re-adopted yet)
            pods = (
                set(_running)
                | set(_starting)
                | ({p.name for p in root.iterdir()} if root.is_dir() else set())
            )
            keep = {f"{_cgroup_prefix()}/{pod_id}" for pod_id in pods}
        try:
            cgroups.sweep(host, _cgroup_prefix(), keep)
        except Exception:
            logger.exception("could not sweep leftover cgroups")
    if os.geteuid() == 0:
        try:
            names = own_namespaces(_host_key())
        except Exception:
            logger.exception("could not sweep leftover network namespaces")
            return
        for name in names:
            with _lock:
                if name not in _netns_users:
                    _netns_delete_unused(name)
        if settings.POD_CIDR:
            try:
                with _lock:
                    netns.sweep_rules()
            except Exception:
                logger.exception("could not sweep leftover pod link rules")


def own_namespaces(host: str) -> list[str]:
    """The network namespaces on this host named for jobs of this installation's database.
    Only these are an agent's to sweep: another installation's (a demo beside a test run)
    may be made and not yet entered by its pod."""
    named = {name: netns.job_of(name, host) for name in netns.names()}
    ours = services.jobs_known({job for job in named.values() if job})
    return [name for name, job in named.items() if job in ours]


# --- starting ------------------------------------------------------------------------------


def state_root() -> Path:
    """Where this agent's shims keep their state: one directory per pod."""
    return Path(settings.AGENT_STATE_DIR).resolve() / _agent_slug()


def pod_start(*, pod_id: str) -> bool:
    """Claim the pod and start it under its shim. False when there is nothing to start
    (claimed already, here or elsewhere, or stopped before it started)."""
    with _lock:
        if pod_id in _running or pod_id in _starting or _shutting_down.is_set():
            return False
        _starting[pod_id] = None
        _starts_began[pod_id] = time.time()
    try:
        launch = services.pod_claim(
            pod_id=pod_id, agent=agent_name(), hostname=socket.gethostname(), now=timezone.now()
        )
        if launch is None:
            return False
        return _launch(launch)
    finally:
        with _lock:
            _starting.pop(pod_id, None)
            _starts_began.pop(pod_id, None)


def _launch(launch: services.PodLaunch) -> bool:
    """Start the claimed pod; False when it did not start (reported, or back in its queue)."""
    isolation = runner.isolation_status(settings.SANDBOX)
    if not isolation.can_run:
        _report_now(
            launch.pod_id,
            reason="SandboxUnavailable",
            message=say("This host cannot isolate pods: {detail}", detail=isolation.detail),
        )
        return False
    netns_name, cgroup = "", None
    state_dir = state_root() / launch.pod_id
    try:
        if isolation.netns and isolation.bwrap:  # insecure mode still uses what it has
            netns_name = _netns_acquire(launch)
        cgroup = _cgroup_create(launch)
        spec = pod_spec(launch, isolation, cgroup=cgroup, netns_name=netns_name)
        manifest = _manifest_reader(launch)  # before the pod runs: all it writes is new
        process = runner.start(spec, state_dir, grace=launch.grace)
    except Exception as exc:
        logger.exception("could not start pod %s", launch.pod_id)
        _release(cgroup, netns_name)
        shutil.rmtree(state_dir, ignore_errors=True)
        if host_short_of(exc):
            _start_later(launch, exc)
            return False
        _report_now(
            launch.pod_id, reason="StartError", message=say("Could not start: {error}", error=exc)
        )
        return False
    _start_delays.pop(launch.pod_id, None)
    entry = _entry(
        launch,
        process,
        manifest=manifest,
        cgroup=cgroup,
        netns_name=netns_name,
        sandbox=isolation.mode,
    )
    _manifest_offset_save(entry)
    if cgroup is not None:  # a new group counts from zero: the first sample has a CPU figure
        entry.metrics_reading = metrics.Reading(
            at=time.monotonic(), cpu_usec=0, disk_read_bytes=0, disk_write_bytes=0
        )
    with _lock:
        _running[launch.pod_id] = entry
        early_stop = _starting.get(launch.pod_id)
    if early_stop is not None:
        process.request_stop(early_stop)
    _report_running(entry)
    if not isolation.complete:
        logger.warning("pod %s runs INSECURELY: %s", launch.pod_id, isolation.detail)
        services.pod_event(
            pod_pk=launch.pod_pk,
            kind="InsecureSandbox",
            now=timezone.now(),
            message=say(
                "This pod is not isolated from the host: {detail} (SANDBOX=insecure)",
                detail=isolation.detail,
            ),
        )
    return True


# What a host, not the job, runs short of when a start fails on it: disk (full, over a
# quota, failing, read-only), memory, descriptors, processes. The job did nothing wrong.
HOST_SHORTAGES = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EIO,
        errno.EROFS,
        errno.ENOMEM,
        errno.EMFILE,
        errno.ENFILE,
        errno.EAGAIN,
    }
)
_start_delays: dict[str, str] = {}  # pod id → why its start waits (said once per reason)


def host_short_of(exc: BaseException) -> bool:
    """Whether a start failed because the host lacks something for a while (a full disk),
    rather than for anything of the job's."""
    return isinstance(exc, OSError) and exc.errno in HOST_SHORTAGES


def _start_later(launch: services.PodLaunch, exc: BaseException) -> None:
    """The host is short of something (`host_short_of`): the pod goes back to its queue,
    and the reconcile tries again every AGENT_RECONCILE_SECONDS; its job waits in
    EnvPreparing instead of failing for the host's fault. Its events say why, once."""
    why = str(getattr(exc, "strerror", "") or exc)
    if not services.pod_unclaim(pod_id=launch.pod_id, agent=agent_name()):
        return
    if _start_delays.get(launch.pod_id) != why:
        _start_delays[launch.pod_id] = why
        services.pod_event(
            pod_pk=launch.pod_pk,
            kind="PodStartDelayed",
            now=timezone.now(),
            message=say(
                "Could not start on this host ({error}); trying again every {seconds} s",
                error=why,
                seconds=f"{settings.AGENT_RECONCILE_SECONDS:g}",
            ),
        )


# Where the agent's reading of a pod's checkpoint manifest is, in the shim's state directory
# (the agent's, never the pod's): a restarted agent reads on from there.
MANIFEST_OFFSET = "manifest.offset"


def _manifest_reader(
    launch: services.PodLaunch, *, state_dir: Path | None = None
) -> runner.ManifestReader | None:
    """Rank 0's reader of the job's checkpoint manifest. Made before the pod's process
    starts, it takes what the file holds then as history (an earlier attempt's records,
    recorded then) and every line the pod writes, from its first instant, as new; for a
    re-adopted pod (`state_dir`), it reads on from where the earlier agent was."""
    if launch.rank != 0:
        return None
    paths = pod_paths(job_id=launch.job_id, pod_id=launch.pod_id)
    offset = None
    if state_dir is not None:
        try:
            offset = int((state_dir / MANIFEST_OFFSET).read_text())
        except (OSError, ValueError):
            offset = None  # from the manifest's end, as before the offset was kept
    manifest = runner.ManifestReader(paths.checkpoint_dir, offset=offset)
    directory = str(paths.checkpoint_dir)
    manifest.track(services.checkpoint_files(job_pk=launch.job_pk, directory=directory))
    return manifest


def _manifest_offset_save(entry: _Entry) -> None:
    """Keep where the manifest's reading is, for a restarted agent (best effort)."""
    if entry.manifest is None:
        return
    state_dir = entry.process.state_dir
    tmp = state_dir / f".{MANIFEST_OFFSET}.{os.getpid()}"
    try:
        tmp.write_text(str(entry.manifest.offset))
        os.replace(tmp, state_dir / MANIFEST_OFFSET)
    except OSError:
        tmp.unlink(missing_ok=True)


def _entry(
    launch: services.PodLaunch,
    process: runner.PodProcess,
    *,
    manifest: runner.ManifestReader | None = None,
    **kwargs,
) -> _Entry:
    paths = pod_paths(job_id=launch.job_id, pod_id=launch.pod_id)
    if manifest is None:
        manifest = _manifest_reader(launch, state_dir=process.state_dir)
    return _Entry(launch=launch, process=process, paths=paths, manifest=manifest, **kwargs)


def _report_running(entry: _Entry) -> None:
    """Pending → Running in the database, at the time the process started."""
    process = entry.process
    try:
        services.pod_report_running(
            pod_id=entry.launch.pod_id,
            pid=process.pid,
            sandbox=entry.sandbox,
            work_dir=str(entry.paths.work_dir),
            log_path=str(entry.paths.log_path),
            now=datetime.fromtimestamp(process.started_at, UTC),
        )
    except Exception:
        logger.exception("could not report pod %s running; trying again", entry.launch.pod_id)
        connection.close()
        return
    entry.running_reported = True


def _report_now(pod_id: str, *, reason: str, message: str) -> None:
    """A pod that never got a process: its exit, now. If the database refuses, its claim
    stays, and the next reconcile queues it again."""
    try:
        services.pod_report_exit(
            pod_id=pod_id, exit_code=None, now=timezone.now(), reason=reason, message=message
        )
    except Exception:
        logger.exception("could not report pod %s (%s)", pod_id, reason)
        connection.close()


def pod_stop(*, pod_id: str, grace: float) -> bool:
    """SIGTERM the pod now, SIGKILL after `grace` seconds (its shim escalates)."""
    with _lock:
        entry = _running.get(pod_id)
        if entry is None:
            if pod_id not in _starting:
                return False
            earlier = _starting[pod_id]
            _starting[pod_id] = grace if earlier is None else min(grace, earlier)
            return True
    entry.process.request_stop(grace)
    return True


# --- re-adopting and reconciling ---------------------------------------------------------


def reconcile_once(*, starts: bool = True) -> None:
    """Compare what the database says this agent runs with what runs, and act: adopt the
    pods of an earlier agent of this name (or found on disk), then (with `starts`) start
    queued pods whose start message never came."""
    work = services.agent_work(
        agent=agent_name(),
        queues=_agent["queues"],
        queued_before=timezone.now() - timedelta(seconds=settings.AGENT_RECONCILE_SECONDS),
    )
    root = state_root()
    on_disk = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    with _lock:
        known = set(_running) | set(_starting)
    adopted = True
    for pod_id in sorted((set(work.claimed) | on_disk) - known):
        try:
            _adopt(pod_id, work.claimed.get(pod_id))
        except Exception:
            logger.exception("could not re-adopt pod %s", pod_id)
            adopted = False
    if adopted:
        with _lock:  # the watch rounds that begin from now on look at every pod it runs
            _watched["adopted"] = True
    for pod_id in work.queued if starts else ():
        if _shutting_down.is_set():
            return
        if pod_start(pod_id=pod_id):
            logger.warning("started pod %s, whose start message never came", pod_id)


def _adopt(pod_id: str, claim: str | None) -> None:
    """Take over a pod this agent does not know: one an earlier agent of this name
    started (`claim` is its PodProcess state), or a state directory left on disk."""
    state_dir = state_root() / pod_id
    process = runner.PodProcess.adopt(state_dir) if state_dir.is_dir() else None
    if process is None:  # its process never started
        shutil.rmtree(state_dir, ignore_errors=True)
        if claim == "starting":
            services.pod_unclaim(pod_id=pod_id, agent=agent_name())
        elif claim == "running":
            _report_now(
                pod_id,
                reason="AgentRestarted",
                message=say(
                    "The agent {agent} restarted and found nothing of the pod's process "
                    "(its state was lost)",
                    agent=agent_name(),
                ),
            )
        return
    launch = services.pod_launch(pod_id=pod_id)
    if launch is None:  # the job was deleted meanwhile
        process.kill()
        process.wait(timeout=10)
        process.discard()
        return
    host = runner.cgroup_host()
    group = host.group(f"{_cgroup_prefix()}/{pod_id}") if host is not None else None
    netns_name = netns.name_for(launch.job_id, _host_key())
    if netns_name in netns.names():
        with _lock:
            _netns_users[netns_name] = _netns_users.get(netns_name, 0) + 1
    else:
        netns_name = ""
    entry = _entry(
        launch,
        process,
        cgroup=group,
        netns_name=netns_name,
        sandbox=runner.isolation_status(settings.SANDBOX).mode,
        running_reported=claim == "running",
    )
    with _lock:
        _running[pod_id] = entry
    if process.result() is None:
        process.note(f"re-adopted by agent {agent_name()}")
        services.pod_event(
            pod_pk=launch.pod_pk,
            kind="PodReadopted",
            now=timezone.now(),
            message=say(
                "Re-adopted by the agent {agent} after its restart: the pod kept running "
                "(pid {pid})",
                agent=agent_name(),
                pid=process.pid,
            ),
        )
    logger.warning(
        "re-adopted pod %s (pid %s, %s)",
        pod_id,
        process.pid,
        "running" if process.result() is None else "ended meanwhile",
    )


def _loop(every: float, step) -> None:
    """Run `step` every `every` seconds until the loops stop; a failure (the database is
    down) is logged, its connection dropped, and the next round tries again."""
    while not _loops_stop.is_set():
        began = time.monotonic()
        try:
            step()
        except Exception:
            logger.exception("%s failed; trying again", step.__name__)
            connection.close()
        _loops_stop.wait(max(every - (time.monotonic() - began), 0.05))
    connection.close()


def start_loops() -> None:
    """At the agent's start: the watch and reconcile threads (once)."""
    if _loops:
        return
    _loops_stop.clear()
    for name, every, step in (
        ("pod-watch", POLL_SECONDS, watch_once),
        ("reconcile", settings.AGENT_RECONCILE_SECONDS, reconcile_once),
    ):
        thread = threading.Thread(target=_loop, args=(every, step), name=name, daemon=True)
        thread.start()
        _loops.append(thread)
    thread = threading.Thread(target=_disk_loop, name="disk-walk", daemon=True)
    thread.start()
    _loops.append(thread)


def stop_loops() -> None:
    _loops_stop.set()
    _disk_wake.set()
    for thread in _loops:
        thread.join(timeout=30)
    _loops.clear()


def shutdown(*, grace_cap: float = 10.0) -> None:
    """The agent is stopping. Its pods keep running under their shims (the next agent
    re-adopts them), unless AGENT_STOP_PODS_ON_EXIT: then they are stopped (grace capped)
    and reported AgentStopped, a platform interruption."""
    _shutting_down.set()
    stop_loops()
    with _lock:
        entries = list(_running.values())
    if not settings.AGENT_STOP_PODS_ON_EXIT:
        if entries:
            logger.warning(
                "agent %s stops; its %d pod(s) keep running under their shims and "
                "the next agent re-adopts them",
                agent_name(),
                len(entries),
            )
        return
    for entry in entries:
        entry.stopped_by_agent = True
        entry.process.request_stop(min(entry.launch.grace, grace_cap))
    deadline = time.monotonic() + grace_cap + 5
    while running_pods() and time.monotonic() < deadline:
        try:
            watch_once()
        except Exception:
            logger.exception("could not report the pods' exits")
            connection.close()
        time.sleep(0.2)
    connection.close()


# --- watching ------------------------------------------------------------------------------


def watch_once() -> None:
    """One round over every pod: report those that ended, check the others.

    A round that reported every end it found is complete, and its start is what the agent
    vouches for (`pods_watched_at`): no further than when a start under way began (its
    process may have ended before this round could see it), nor than when a shim said its
    pod had ended without saying how yet (`runner.PodProcess.ending_since`). Rounds before
    the pods of an earlier agent are re-adopted vouch for nothing."""
    with _lock:
        began = time.time()
        entries = list(_running.values())
        adopted = _watched["adopted"]
        bounds = [began, *_starts_began.values()]
    for entry in entries:
        if entry.exit is None:
            entry.exit = entry.process.result()
    complete = True
    for entry in entries:
        if entry.exit is not None:
            complete = _finish(entry) and complete
    live = [e for e in entries if e.exit is None]
    if complete and adopted:
        bounds += [at for e in live if (at := e.process.ending_since()) is not None]
        _watched["at"] = min(bounds)
    if not live:
        return
    watches = services.pods_watch(pod_pks=[e.launch.pod_pk for e in live])
    now = timezone.now()
    for entry in live:
        try:
            _check(entry, watches.get(entry.launch.pod_pk), now)
        except Exception:  # one pod's trouble must not stop the others' checks
            logger.exception("checking pod %s failed", entry.launch.pod_id)
    _sample_metrics(live)


def _finish(entry: _Entry) -> bool:
    """The pod's process ended: why, release its namespace and cgroup (once), report the
    exit at the time it happened, then forget it. A failed report is tried again: False."""
    launch, ended = entry.launch, entry.exit
    if entry.ending is None:
        try:
            _report_checkpoints(entry, last=True)
        except Exception:
            logger.exception("could not read pod %s's last checkpoints", launch.pod_id)
        entry.ending = _exit_reason(entry, ended)
        _release(entry.cgroup, entry.netns_name)
    reason, message = entry.ending
    if not entry.running_reported:  # it started and ended before it was reported running
        _report_running(entry)
        if not entry.running_reported:
            return False
    try:
        services.pod_report_exit(
            pod_id=launch.pod_id,
            exit_code=ended.code,
            now=datetime.fromtimestamp(ended.at, UTC),
            reason=reason,
            message=message,
        )
    except Exception:
        logger.exception("could not report pod %s's exit; trying again", launch.pod_id)
        connection.close()
        return False
    entry.process.discard()
    with _lock:
        _running.pop(launch.pod_id, None)
        if not any(e.launch.job_pk == launch.job_pk for e in _running.values()):
            _disk_seen.pop(launch.job_pk, None)
    return True


def _release(cgroup, netns_name: str) -> None:
    if cgroup is not None:
        try:
            cgroup.remove()
        except Exception:
            logger.exception("could not remove cgroup %s", cgroup)
    if netns_name:
        _netns_release(netns_name)


def _exit_reason(entry: _Entry, ended: runner.Exit) -> tuple[str, str]:
    """Why the pod ended, in words its user understands, when it was not its own doing:
    the kernel or the disk watchdog stopped it at a limit, or the platform lost it."""
    code, quota = ended.code, settings.POD_DISK_QUOTA_MIB
    if ended.vanished:
        return "AgentRestarted", say(
            "The pod's supervisor process ended without an exit status "
            "(the host restarted, or it was killed)"
        )
    if entry.over_quota:
        return "DiskQuotaExceeded", entry.over_quota
    if code == runner.SIGXFSZ_EXIT:
        return "DiskQuotaExceeded", say(
            "A file grew past the disk quota of {quota} MiB (exit code {code})",
            quota=quota,
            code=code,
        )
    outcome = ""
    if entry.cgroup is not None and code != 0:
        try:
            outcome = entry.cgroup.outcome(code)
        except OSError:
            outcome = ""
    if outcome == "OOMKilled":
        return "OOMKilled", say(
            "Killed for using more than its memory limit of {limit} MiB (exit code {code})",
            limit=entry.launch.memory_mib,
            code=code,
        )
    if outcome == "TooManyProcesses":
        return "TooManyProcesses", say(
            "Hit its limit of {limit} processes and threads (exit code {code})",
            limit=settings.POD_PIDS_MAX,
            code=code,
        )
    if entry.stopped_by_agent:
        return "AgentStopped", say(
            "Stopped with its agent {agent} (exit code {code})", agent=agent_name(), code=code
        )
    return "", ""


def _check(entry: _Entry, watch: services.PodWatch | None, now: datetime) -> None:
    """Once a second: checkpoints, disk use, and whether the pod should still run."""
    launch, process = entry.launch, entry.process
    if not entry.running_reported:
        _report_running(entry)
    try:  # what the pod wrote: whatever it holds, the checks below still run
        _report_checkpoints(entry)
    except Exception:
        logger.exception("could not read pod %s's checkpoints", launch.pod_id)
    if time.monotonic() >= entry.next_disk_check:
        entry.next_disk_check = time.monotonic() + settings.POD_DISK_CHECK_SECONDS
        _disk_request(entry.launch.job_pk, entry.paths.job_dir)
    _check_disk(entry)
    _report_output(entry)
    if watch is None or watch.status not in LIVE_POD_STATUSES:
        if process.stop_requested_at is None:
            process.request_stop(launch.grace)  # stopped, preempted or failed elsewhere
    elif watch.deadline is not None and now >= watch.deadline:
        services.job_timeout(job_pk=launch.job_pk, now=now)
    elif watch.hung is not None:
        services.job_hang(job_pk=launch.job_pk, now=now)


_metrics: dict = {"next": 0.0, "gpus": None}


def _gpus() -> sampler.Gpus:
    """NVML, loaded once (on the first round with a GPU pod): where it does not load, the
    GPU figures stay absent and the log says why, once."""
    if _metrics["gpus"] is None:
        _metrics["gpus"] = sampler.Gpus()
        if not _metrics["gpus"].loaded:
            logger.warning("GPU metrics are absent on this host: %s", _metrics["gpus"].problem)
    return _metrics["gpus"]


def _sample_metrics(entries: list[_Entry]) -> None:
    """Every POD_METRICS_SECONDS: each running pod's figures (apps/agent/sampler.py), stored
    in one insert. A round the database refuses is lost (a gap in the series), not retried:
    its rates are already the next round's baseline."""
    began = time.monotonic()
    if began < _metrics["next"] - POLL_SECONDS / 2:  # the watch loop's jitter: not a skip
        return
    _metrics["next"] = began + settings.POD_METRICS_SECONDS
    devices = _gpus().read() if any(e.launch.gpu_ids for e in entries) else None
    net_seen: dict[str, tuple[int, int]] = {}
    samples = []
    for entry in entries:
        if not entry.running_reported:
            continue
        try:
            reading = sampler.pod_reading(
                at=time.monotonic(),
                cgroup=entry.cgroup,
                netns_name=entry.netns_name,
                gpu_ids=entry.launch.gpu_ids,
                devices=devices,
                net_seen=net_seen,
                previous=entry.metrics_reading,
            )
        except Exception:
            logger.exception("could not read pod %s's metrics", entry.launch.pod_id)
            continue
        samples.append((entry.launch.pod_pk, metrics.figures(entry.metrics_reading, reading)))
        entry.metrics_reading = reading
    try:
        services.pod_metrics_record(at=timezone.now(), samples=samples)
    except Exception:
        logger.exception("could not store %d pods' metrics", len(samples))
        connection.close()


# How far behind the database may know a pod's last output (hang intervals are longer:
# apps.jobs.specs.MIN_HANG_SECONDS).
OUTPUT_REPORT_SECONDS = 5.0


def _report_output(entry: _Entry) -> None:
    """When the pod's log last grew, for AIMaster's hang detection: its modification time,
    told to the database once it is OUTPUT_REPORT_SECONDS newer than the one told before, or
    once the log has been still that long (so its last output is told too). The log is the
    agent's own file, outside the sandbox, looked at without following a link."""
    try:
        entry.log_mtime = os.stat(entry.paths.log_path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return
    at = entry.log_mtime / 1e9
    if at <= entry.output_reported:
        return
    if at - entry.output_reported >= OUTPUT_REPORT_SECONDS or time.time() - at >= (
        OUTPUT_REPORT_SECONDS
    ):
        services.pod_output_report(pod_pk=entry.launch.pod_pk, at=datetime.fromtimestamp(at, UTC))
        entry.output_reported = at


# The disk walker: a thread of its own measures each job's directory (a walk of 200,000
# files takes about half a second) and hands the figure to the watch loop, which applies the
# quota. Ten such jobs walked on the watch loop held up every other pod's exit, stop and
# timeout by seconds.
_disk_seen: dict[int, tuple[float, housekeeping.DiskUsage]] = {}  # job pk → (walk began, use)
_disk_wanted: dict[int, Path] = {}  # job pk → its directory: a walk is due
_disk_wake = threading.Event()


def _disk_request(job_pk: int, job_dir: Path) -> None:
    """Ask the disk walker for the job's disk use here: one walk of its directory per check
    period, whichever of its pods on this host asks first (the others reuse it)."""
    with _lock:
        seen = _disk_seen.get(job_pk)
        if seen is not None and time.monotonic() - seen[0] < settings.POD_DISK_CHECK_SECONDS:
            return
        _disk_wanted[job_pk] = job_dir
    _disk_wake.set()


def disk_walk_once() -> int:
    """Walk the directory of each job asked for (`_disk_request`), keep the figure for the
    watch loop and report it on the job; how many were walked."""
    with _lock:
        wanted = dict(_disk_wanted)
        _disk_wanted.clear()
    for job_pk, job_dir in wanted.items():
        began = time.monotonic()
        usage = housekeeping.disk_usage(job_dir, max_entries=settings.POD_MAX_FILES + 1)
        held = _held_open(job_pk, job_dir)
        usage = housekeeping.DiskUsage(
            usage.bytes + held.bytes, usage.files + held.files, usage.complete and held.complete
        )
        with _lock:
            if not any(e.launch.job_pk == job_pk for e in _running.values()):
                continue  # its pods ended meanwhile
            _disk_seen[job_pk] = (began, usage)
        try:
            housekeeping.job_disk_report(job_pk=job_pk, bytes=usage.bytes, now=timezone.now())
        except Exception:
            logger.exception("could not record job %s's disk use", job_pk)
            connection.close()
    return len(wanted)


def _held_open(job_pk: int, job_dir: Path) -> housekeeping.DiskUsage:
    """The files the job's pods here removed but still hold open or mapped (each pod's
    processes: its cgroup's, else those below its shim)."""
    with _lock:
        entries = [e for e in _running.values() if e.launch.job_pk == job_pk]
    pids: list[int] = []
    for entry in entries:
        if entry.cgroup is not None:
            pids += entry.cgroup.pids()
        elif entry.process.shim_pid:
            pids += shim.descendants(entry.process.shim_pid)
    try:
        dev = os.stat(job_dir).st_dev
    except OSError:
        return housekeeping.DiskUsage(0, 0, True)
    return housekeeping.held_open(pids, dev=dev, max_entries=settings.POD_MAX_FILES + 1)


def _disk_loop() -> None:
    while not _loops_stop.is_set():
        _disk_wake.wait(POLL_SECONDS)
        _disk_wake.clear()
        try:
            disk_walk_once()
        except Exception:
            logger.exception("disk_walk_once failed; trying again")
            connection.close()
    connection.close()


def _check_disk(entry: _Entry) -> None:
    """The disk quota: the job's files on this host (its pods' work dirs, checkpoints, data
    and logs). Over it, in bytes or in files, the pod is stopped at once: DiskQuotaExceeded.
    The figure is also the job's disk use on its page."""
    quota, max_files = settings.POD_DISK_QUOTA_MIB * runner.MIB, settings.POD_MAX_FILES
    with _lock:
        seen = _disk_seen.get(entry.launch.job_pk)
    if seen is None or seen[0] <= entry.disk_measured or entry.over_quota:
        return  # no new figure from the disk walker
    entry.disk_measured, usage = seen
    if usage.bytes > quota:
        entry.over_quota = say(
            "The job's files on this host use {used} MiB, more than the disk quota of {quota} MiB",
            used=f"{usage.bytes / runner.MIB:,.0f}",
            quota=f"{settings.POD_DISK_QUOTA_MIB:,}",
        )
    elif not usage.complete or usage.files > max_files:
        entry.over_quota = say(
            "The job created more than {files} files on this host (the disk quota's file limit)",
            files=f"{max_files:,}",
        )
    if entry.over_quota:
        entry.process.note(f"disk quota exceeded: {entry.over_quota}")
        entry.process.request_stop(0)


def _report_checkpoints(entry: _Entry, *, last: bool = False) -> None:
    """New checkpoints in the manifest (and once the pod ended, the checkpoint files it left
    unannounced); and, when there were some (EasyCkpt removes the oldest as it writes one)
    or the pod ended, the recorded ones whose files are gone."""
    manifest, launch = entry.manifest, entry.launch
    if manifest is None:
        return
    found_any = False
    entries = manifest.new_entries()
    if last:  # the pod is gone: a checkpoint it renamed into place but never announced too
        named = {entry["file"] for entry in entries}
        entries += [e for e in manifest.unannounced() if e["file"] not in named]
    for found in entries:
        if "resumed" in found:
            services.checkpoint_resumed(
                pod_pk=launch.pod_pk,
                step=found["resumed"],
                path=str(manifest.path.parent / found["file"]) if found["file"] else None,
                damaged=[str(manifest.path.parent / name) for name in found["damaged"]],
                at=timezone.now(),
            )
            continue
        path = str(manifest.path.parent / found["file"])
        services.checkpoint_report(
            job_pk=launch.job_pk,
            step=found["step"],
            path=path,
            size_bytes=found["bytes"],
            at=datetime.fromtimestamp(found["time"], tz=UTC),
        )
        manifest.track([path])
        found_any = True
    if found_any:
        _manifest_offset_save(entry)
    if found_any or last:
        services.checkpoints_removed(job_pk=launch.job_pk, paths=manifest.gone(), at=timezone.now())
    while manifest.problems:
        services.pod_event(
            pod_pk=launch.pod_pk,
            kind="CheckpointManifestInvalid",
            message=manifest.problems.pop(0),
            now=timezone.now(),
        )
