"""Retention and disk use of POD_WORK_ROOT (docs/execution.md, "Retention and disk use").

Every job has POD_WORK_ROOT/<job id>/ with a work dir per pod, checkpoints/ (EasyCkpt), data/
and logs/ (the agent's). Everything but logs/ is the pods' to write, so it is read and removed
as hostile: symlinks are never followed (every directory is opened relative to its parent with
O_NOFOLLOW and checked against what its parent listed), FIFOs and devices are never opened,
deep trees are walked without recursion and with a bounded number of open descriptors, and
millions of files are counted up to a bound.

- `disk_usage` (pure, no Django): the space a tree takes.
- `job_dirs_sweep` (a Django service): what each agent's housekeeping thread does every
  POD_HOUSEKEEPING_SECONDS — record each job's disk use, and once a job has ended more than
  POD_WORK_RETENTION_HOURS ago remove its pods' work dirs and data/, keeping logs/ and the
  newest POD_KEEP_CHECKPOINTS checkpoints; directories of deleted jobs are removed whole.
- `job_disk_report`: record a job's disk use (the pod watchdog calls it too).
- `housekeeping_round` also removes pod metric samples older than POD_METRICS_RETENTION_DAYS.
- `start_housekeeping`: the thread.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.agent import services
from apps.agent.models import PodProcess
from apps.jobs.models import FINISHED_STATUSES, Checkpoint, Job

logger = logging.getLogger(__name__)

# --- Disk use (pure: no Django) ------------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# Directories of the current path kept open, from the top; deeper ones are reached back
# through ".." (checked against the directory we came from), so no tree exhausts the fds.
_OPEN_DEPTH = 32
# An entry that vanished or was replaced while we looked at it: skipped, not an error.
_GONE = (FileNotFoundError, NotADirectoryError)


@dataclass(frozen=True)
class DiskUsage:
    """bytes: allocated space (st_blocks × 512, each hard-linked inode once); files: entries
    counted (every file, directory, link, FIFO… below the path; 1 for a path that is not a
    directory); complete: False when the walk stopped early (more than max_entries entries,
    or a directory it was not allowed to read): the numbers are then a lower bound."""

    bytes: int
    files: int
    complete: bool


@dataclass
class _Frame:
    dev: int
    ino: int
    fd: int | None
    pending: list[tuple[str, int, int]] = field(default_factory=list)  # subdirs: name, dev, ino
    name: str = ""  # its name in its parent


class _Full(Exception):
    pass


def _blocks(st: os.stat_result) -> int:
    return st.st_blocks * 512


def _open_dir_at(parent_fd: int | None, name: str | os.PathLike, dev: int, ino: int) -> int | None:
    """The directory `name` (relative to parent_fd) opened without following a symlink, if
    it is still the directory (dev, ino) its parent listed; None when it vanished or changed."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except _GONE:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink now
            return None
        raise
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (dev, ino):
        os.close(fd)
        return None
    return fd


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


class _Counter:
    def __init__(self, max_entries: int, dev: int) -> None:
        self.max_entries, self.dev = max_entries, dev
        self.bytes = self.files = 0
        self.complete = True
        self._linked: set[tuple[int, int]] = set()

    def scan(self, fd: int) -> list[tuple[str, int, int]]:
        """Count the entries of the directory open as fd; its subdirectories (same device)."""
        subdirs = []
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)  # fstatat(fd, name, NOFOLLOW)
                except _GONE:
                    continue
                if self.files >= self.max_entries:
                    raise _Full
                self.files += 1
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if key in self._linked:
                        continue
                    self._linked.add(key)
                self.bytes += _blocks(st)
                if stat.S_ISDIR(st.st_mode):
                    if st.st_dev == self.dev:  # a mount point is counted, never entered
                        subdirs.append((entry.name, st.st_dev, st.st_ino))
        return subdirs


def disk_usage(path: Path, *, max_entries: int = 200_000) -> DiskUsage:
    """The disk space `path` and everything below it take, without following any symlink or
    opening anything but directories; at most `max_entries` entries are counted (then
    complete is False). A missing path uses nothing."""
    try:
        st = os.lstat(path)
    except _GONE:
        return DiskUsage(0, 0, True)
    if not stat.S_ISDIR(st.st_mode):
        return DiskUsage(_blocks(st), 1, True)
    counter = _Counter(max_entries, st.st_dev)
    counter.bytes = _blocks(st)
    try:
        fd = _open_dir_at(None, path, st.st_dev, st.st_ino)
    except PermissionError:
        return DiskUsage(counter.bytes, 0, False)
    if fd is None:
        return DiskUsage(0, 0, True)
    frames = [_Frame(st.st_dev, st.st_ino, fd)]
    try:
        frames[0].pending = counter.scan(fd)
        while frames:
            top = frames[-1]
            if top.pending:
                name, dev, ino = top.pending.pop()
                try:
                    child = _open_dir_at(top.fd, name, dev, ino)
                    if child is None:
                        continue
                except PermissionError:
                    counter.complete = False
                    continue
                try:
                    subdirs = counter.scan(child)
                except PermissionError:
                    counter.complete = False
                    subdirs = []
                except BaseException:
                    os.close(child)
                    raise
                if not subdirs:
                    os.close(child)
                    continue
                if len(frames) >= _OPEN_DEPTH:
                    _close(top.fd)
                    top.fd = None
                frames.append(_Frame(dev, ino, child, subdirs))
                continue
            frames.pop()
            if frames and frames[-1].fd is None:
                parent = frames[-1]
                parent.fd = _open_dir_at(top.fd, "..", parent.dev, parent.ino)
                if parent.fd is None:  # moved elsewhere meanwhile: we cannot go back
                    counter.complete = False
                    _close(top.fd)
                    break
            _close(top.fd)
    except _Full:
        counter.complete = False
    finally:
        for frame in frames:
            _close(frame.fd)
    return DiskUsage(counter.bytes, counter.files, counter.complete)


def held_open(pids: Iterable[int], *, dev: int, max_entries: int = 200_000) -> DiskUsage:
    """The files on device `dev` that these processes removed but hold open (a descriptor)
    or mapped: no walk lists them, yet their blocks stay taken until the last holder lets
    go, so a pod writing files, removing them and keeping them would fill the disk past any
    quota. Read as root from /proc: each descriptor's link, and each mapping the kernel
    marks "(deleted)", stat'ed, never opened (a FIFO never blocks); each inode once. Past
    `max_entries` links looked at, complete is False (as for a walk past its bound)."""
    seen: set[int] = set()
    total = looked = 0

    def add(link: str) -> None:
        nonlocal total
        try:
            st = os.stat(link)
        except OSError:
            return
        if st.st_nlink == 0 and st.st_dev == dev and stat.S_ISREG(st.st_mode):
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += _blocks(st)

    for pid in pids:
        proc = f"/proc/{int(pid)}"
        try:
            fds = os.listdir(f"{proc}/fd")
            with open(f"{proc}/maps", "rb") as maps:
                removed = [
                    line.split(b" ", 1)[0].decode()
                    for line in maps
                    if line.rstrip(b"\n").endswith(b" (deleted)")
                ]
        except OSError:  # gone meanwhile
            continue
        links = [f"{proc}/fd/{fd}" for fd in fds]
        links += [f"{proc}/map_files/{span}" for span in removed]
        for link in links:
            looked += 1
            if looked > max_entries:
                return DiskUsage(total, len(seen), False)
            add(link)
    return DiskUsage(total, len(seen), True)


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove `name` (in the directory open as parent_fd) and everything below it, whatever
    it is, never following a symlink and never crossing into another file system; without
    recursion and with a bounded number of open descriptors, however deep the tree.
    Raises OSError when something could not be removed (after removing all it could)."""
    try:
        st = os.lstat(name, dir_fd=parent_fd)
    except _GONE:
        return
    if not stat.S_ISDIR(st.st_mode):
        _unlink(parent_fd, name)
        return
    fd = _open_dir_at(parent_fd, name, st.st_dev, st.st_ino)
    if fd is None:  # replaced meanwhile: by a symlink or a file, which unlink removes
        _unlink(parent_fd, name)
        return
    dev = st.st_dev
    stuck: set[tuple[int, int, str]] = set()  # (dir dev, dir ino, name) that would not go
    frames = [_Frame(st.st_dev, st.st_ino, fd, name=name)]
    try:
        while frames:
            top = frames[-1]
            subdir = None
            with os.scandir(top.fd) as entries:
                for entry in entries:
                    key = (top.dev, top.ino, entry.name)
                    if key in stuck:
                        continue
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except _GONE:
                        continue
                    if stat.S_ISDIR(est.st_mode):
                        if est.st_dev != dev:
                            stuck.add(key)  # a mount point: never entered
                            continue
                        subdir = (entry.name, est)
                        break
                    try:
                        _unlink(top.fd, entry.name)
                    except OSError:
                        stuck.add(key)
            if subdir is not None:
                sub_name, est = subdir
                try:
                    child = _open_dir_at(top.fd, sub_name, est.st_dev, est.st_ino)
                except OSError:
                    stuck.add((top.dev, top.ino, sub_name))
                    continue
                if child is None:  # no longer that directory: the next scan sees what it is
                    try:
                        _unlink(top.fd, sub_name)
                    except OSError:
                        stuck.add((top.dev, top.ino, sub_name))
                    continue
                if len(frames) >= _OPEN_DEPTH:
                    _close(top.fd)
                    top.fd = None
                frames.append(_Frame(est.st_dev, est.st_ino, child, name=sub_name))
                continue
            # `top` is empty now (but for what would not go): remove it from its parent.
            frames.pop()
            if frames:
                parent = frames[-1]
                if parent.fd is None:
                    parent.fd = _open_dir_at(top.fd, "..", parent.dev, parent.ino)
                    if parent.fd is None:
                        _close(top.fd)
                        raise OSError(f"{name}: a directory moved while it was being removed")
                parent_of_top, parent_key = parent.fd, (parent.dev, parent.ino)
            else:
                parent_of_top, parent_key = parent_fd, (-1, -1)
            _close(top.fd)
            top.fd = None
            try:
                os.rmdir(top.name, dir_fd=parent_of_top)
            except FileNotFoundError:
                pass
            except OSError:
                stuck.add((*parent_key, top.name))
    finally:
        for frame in frames:
            _close(frame.fd)
    if stuck:
        raise OSError(f"{name}: {len(stuck)} entries could not be removed")


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


# --- Sweeping job directories (Django) -----------------------------------------------------

CHECKPOINTS, LOGS, MANIFEST = "checkpoints", "logs", "manifest.jsonl"
# Written by the agent into a job directory it swept (the pods are gone by then; and the
# marker only counts together with Job.work_swept_at, which no pod can set).
SWEPT_MARKER = ".paiweb-swept"
# A finished job is measured again until this long after it ended (its pods' last writes).
SETTLE = timedelta(minutes=5)
_LOG_SCAN_MAX = 10_000
_QUERY_CHUNK = 500


@dataclass(frozen=True)
class SweepResult:
    """Job ids (directory names) by what one sweep did to them."""

    measured: tuple[str, ...] = ()  # disk use recorded
    swept: tuple[str, ...] = ()  # work dirs and data removed, old checkpoints too
    removed: tuple[str, ...] = ()  # directories of unknown (deleted) jobs, removed whole
    failed: tuple[str, ...] = ()  # something could not be removed: logged, tried again later


def job_disk_report(*, job_pk: int, bytes: int, now: datetime) -> None:
    """Record a job's disk use (one UPDATE)."""
    Job.objects.filter(pk=job_pk).update(disk_bytes=max(int(bytes), 0), disk_measured_at=now)


def job_dirs_sweep(
    *, root: Path, now: datetime, retention: timedelta, keep_checkpoints: int
) -> SweepResult:
    """One round over the job directories under `root` (see the module's docstring)."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except _GONE:
        return SweepResult()
    measured, swept, removed, failed = [], [], [], []
    try:
        names = sorted(_job_dir_names(root_fd))
        rows = {}
        for i in range(0, len(names), _QUERY_CHUNK):
            chunk = names[i : i + _QUERY_CHUNK]
            for row in Job.objects.filter(job_id__in=chunk).values(
                "pk",
                "job_id",
                "status",
                "finished_at",
                "status_changed_at",
                "disk_measured_at",
                "work_swept_at",
            ):
                rows[row["job_id"]] = row
        live = set()
        pks = [row["pk"] for row in rows.values()]
        for i in range(0, len(pks), _QUERY_CHUNK):
            live.update(
                PodProcess.objects.filter(
                    pod__job_id__in=pks[i : i + _QUERY_CHUNK],
                    state__in=[
                        PodProcess.State.QUEUED,
                        PodProcess.State.STARTING,
                        PodProcess.State.RUNNING,
                    ],
                ).values_list("pod__job_id", flat=True)
            )
        for name in names:
            row = rows.get(name)
            try:
                if row is None:
                    if _last_activity(root_fd, name) <= now - retention:
                        remove_tree(root_fd, name)
                        removed.append(name)
                        logger.info("housekeeping: removed %s (no such job)", name)
                    continue
                ended = row["finished_at"] or row["status_changed_at"]
                finished = row["status"] in FINISHED_STATUSES and row["pk"] not in live
                if not finished:
                    _measure(root, name, row["pk"], now)
                    measured.append(name)
                elif ended <= now - retention:
                    if row["work_swept_at"] is not None and _marked(root_fd, name):
                        continue
                    _sweep_job_dir(root_fd, name, row["pk"], keep_checkpoints)
                    _measure(root, name, row["pk"], now)
                    Job.objects.filter(pk=row["pk"], work_swept_at__isnull=True).update(
                        work_swept_at=now
                    )
                    measured.append(name)
                    swept.append(name)
                    logger.info("housekeeping: swept the work dirs of job %s", name)
                elif row["disk_measured_at"] is None or row["disk_measured_at"] < ended + SETTLE:
                    _measure(root, name, row["pk"], now)
                    measured.append(name)
            except OSError as exc:
                failed.append(name)
                logger.warning("housekeeping: job directory %s: %s", name, exc)
    finally:
        os.close(root_fd)
    return SweepResult(tuple(measured), tuple(swept), tuple(removed), tuple(failed))


def _job_dir_names(root_fd: int) -> list[str]:
    """Real directories (not links) directly under the root, but hidden ones."""
    names = []
    with os.scandir(root_fd) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
            except OSError:
                continue
    return names


def _measure(root: Path, name: str, job_pk: int, now: datetime) -> None:
    usage = disk_usage(root / name)
    job_disk_report(job_pk=job_pk, bytes=usage.bytes, now=now)


def _open_job_dir(root_fd: int, name: str) -> int:
    st = os.lstat(name, dir_fd=root_fd)
    fd = _open_dir_at(root_fd, name, st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None
    if fd is None:
        raise FileNotFoundError(f"{name}: not a directory any more")
    return fd


def _marked(root_fd: int, name: str) -> bool:
    try:
        st = os.stat(f"{name}/{SWEPT_MARKER}", dir_fd=root_fd, follow_symlinks=False)
    except _GONE:
        return False
    return stat.S_ISREG(st.st_mode)


def _last_activity(root_fd: int, name: str) -> datetime:
    """When the agent last wrote into a job's directory: the directory itself, its logs/
    and the logs in it (the pods cannot write any of these; their own dirs' times they can)."""
    times = [os.lstat(name, dir_fd=root_fd).st_mtime]
    job_fd = _open_job_dir(root_fd, name)
    try:
        logs_st = os.lstat(LOGS, dir_fd=job_fd)
        if stat.S_ISDIR(logs_st.st_mode):
            times.append(logs_st.st_mtime)
            logs_fd = _open_dir_at(job_fd, LOGS, logs_st.st_dev, logs_st.st_ino)
            if logs_fd is not None:
                try:
                    with os.scandir(logs_fd) as entries:
                        for i, entry in enumerate(entries):
                            if i >= _LOG_SCAN_MAX:
                                break
                            try:
                                times.append(entry.stat(follow_symlinks=False).st_mtime)
                            except _GONE:
                                continue
                finally:
                    os.close(logs_fd)
    except _GONE:
        pass
    finally:
        os.close(job_fd)
    return datetime.fromtimestamp(max(times), tz=UTC)


def _sweep_job_dir(root_fd: int, name: str, job_pk: int, keep_checkpoints: int) -> None:
    """Remove everything in a finished job's directory but logs/ and the newest checkpoints
    (and their manifest), then mark it swept. Raises OSError when something would not go."""
    job_fd = _open_job_dir(root_fd, name)
    try:
        problems = []
        with os.scandir(job_fd) as entries:
            names = [entry.name for entry in entries]
        for entry_name in names:
            try:
                if entry_name == LOGS and _is_real_dir(job_fd, LOGS):
                    continue
                if entry_name == CHECKPOINTS and _is_real_dir(job_fd, CHECKPOINTS):
                    _prune_checkpoints(job_fd, job_pk, keep_checkpoints)
                    continue
                remove_tree(job_fd, entry_name)  # pod work dirs, data/, anything else
            except OSError as exc:
                problems.append(f"{entry_name}: {exc}")
        if problems:
            raise OSError("; ".join(problems)[:2000])
        try:
            marker = os.open(
                SWEPT_MARKER,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=job_fd,
            )
        except FileExistsError:
            return
        with os.fdopen(marker, "w") as out:
            out.write(timezone.now().isoformat() + "\n")
    finally:
        os.close(job_fd)


def _is_real_dir(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode)
    except _GONE:
        return False


def _prune_checkpoints(job_fd: int, job_pk: int, keep: int) -> None:
    """Keep manifest.jsonl and the newest `keep` checkpoint files the Checkpoint rows name
    (files directly in checkpoints/ that are still there, and not found damaged); remove
    everything else. Newest by step, as EasyCkpt loads and keeps them
    (`lifecycle.resume_step`): a clock ahead stamps an older step later, and a damaged file
    would take the place of one a restart can load."""
    st = os.lstat(CHECKPOINTS, dir_fd=job_fd)
    ckpt_fd = _open_dir_at(job_fd, CHECKPOINTS, st.st_dev, st.st_ino)
    if ckpt_fd is None:
        return
    try:
        kept: list[str] = []
        for path in (
            Checkpoint.objects.filter(job_id=job_pk, damaged_at__isnull=True)
            .order_by("-step", "-created_at", "-id")
            .values_list("path", flat=True)
            .iterator()
        ):
            if len(kept) >= keep:
                break
            file_name = Path(path).name
            if (
                Path(path).parent.name != CHECKPOINTS
                or file_name in kept
                or file_name in ("", ".", "..", MANIFEST)
                or not _is_regular(ckpt_fd, file_name)
            ):
                continue
            kept.append(file_name)
        keep_names = {*kept, MANIFEST}
        problems = []
        with os.scandir(ckpt_fd) as entries:
            names = [entry.name for entry in entries]
        removed = []
        for entry_name in names:
            if entry_name in keep_names and _is_regular(ckpt_fd, entry_name):
                continue
            try:
                remove_tree(ckpt_fd, entry_name)
                removed.append(entry_name)
            except OSError as exc:
                problems.append(str(exc))
        _mark_removed(job_pk, set(removed))
        if problems:
            raise OSError(f"{CHECKPOINTS}: " + "; ".join(problems)[:1000])
    finally:
        os.close(ckpt_fd)


def _mark_removed(job_pk: int, removed: set[str]) -> None:
    """The job's checkpoint rows whose files a prune removed say so."""
    if not removed:
        return
    gone = [
        path
        for path in Checkpoint.objects.filter(job_id=job_pk, removed_at__isnull=True)
        .values_list("path", flat=True)
        .iterator()
        if Path(path).name in removed and Path(path).parent.name == CHECKPOINTS
    ]
    services.checkpoints_removed(job_pk=job_pk, paths=gone, at=timezone.now())


def _is_regular(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(name, dir_fd=dir_fd).st_mode)
    except _GONE:
        return False


# --- The housekeeping thread ---------------------------------------------------------------

_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def housekeeping_round() -> SweepResult | None:
    """One sweep of settings.POD_WORK_ROOT with the settings' retention, and of the pods'
    metric samples older than POD_METRICS_RETENTION_DAYS; never raises."""
    try:
        services.pod_metrics_sweep(
            now=timezone.now(), retention=timedelta(days=settings.POD_METRICS_RETENTION_DAYS)
        )
    except Exception:
        logger.exception("housekeeping of the pods' metric samples failed")
        connection.close()
    try:
        return job_dirs_sweep(
            root=Path(settings.POD_WORK_ROOT),
            now=timezone.now(),
            retention=timedelta(hours=settings.POD_WORK_RETENTION_HOURS),
            keep_checkpoints=settings.POD_KEEP_CHECKPOINTS,
        )
    except Exception:
        logger.exception("housekeeping of %s failed", settings.POD_WORK_ROOT)
        return None
    finally:
        connection.close()  # this thread's own connection: never left open between rounds


def start_housekeeping(*, interval: float, stop: threading.Event | None = None) -> threading.Thread:
    """A daemon thread running `housekeeping_round` now and every `interval` seconds (until
    `stop` is set). Started once per process: a second call returns the running thread."""
    global _thread
    with _thread_lock:
        if _thread is not None and _thread.is_alive():
            return _thread
        stop = stop or threading.Event()

        def loop() -> None:
            while not stop.is_set():
                housekeeping_round()
                stop.wait(interval)

        _thread = threading.Thread(target=loop, name="housekeeping", daemon=True)
        _thread.start()
        return _thread
