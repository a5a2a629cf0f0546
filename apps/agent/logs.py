"""Reading pods' log files: the last N lines, and what was added since a byte offset.

The agent writes each pod's stdout and stderr to POD_WORK_ROOT/<job>/logs/<pod>.log (outside
anything the sandboxed pod can write). The console reads the same file, so the web server
must see POD_WORK_ROOT: the same host, or shared storage when agents run elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from apps.agent.models import PodProcess
from apps.agent.supervisor import pod_paths
from apps.jobs.models import LIVE_POD_STATUSES, Pod

FOLLOW_CHUNK_BYTES = 256 * 1024
TAIL_BLOCK = 64 * 1024


def pod_log_path(pod: Pod) -> Path:
    """Where the pod's log is (or will be)."""
    recorded = PodProcess.objects.filter(pod=pod).values_list("log_path", flat=True).first()
    return (
        Path(recorded) if recorded else pod_paths(job_id=pod.job.job_id, pod_id=pod.pod_id).log_path
    )


def pod_log_finished(pod: Pod) -> bool:
    """True once nothing more will be written: the pod ended and its process is gone."""
    state = PodProcess.objects.filter(pod=pod).values_list("state", flat=True).first()
    if state is None:
        return pod.status not in LIVE_POD_STATUSES
    return state in {PodProcess.State.EXITED, PodProcess.State.CANCELLED}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def log_tail(path: Path, lines: int) -> tuple[str, int]:
    """The last `lines` lines of the file and its size (the offset to follow from)."""
    size = _size(path)
    if size == 0 or lines <= 0:
        return "", size
    with path.open("rb") as log:
        end, data = size, b""
        while end > 0 and data.count(b"\n") <= lines:
            start = max(end - TAIL_BLOCK, 0)
            log.seek(start)
            data = log.read(end - start) + data
            end = start
    kept = data.splitlines(keepends=True)[-lines:]
    return b"".join(kept).decode("utf-8", errors="replace"), size


@dataclass(frozen=True)
class LogChunk:
    text: str
    offset: int  # where the next read starts
    size: int  # the file's size when read


def log_read(
    path: Path, offset: int, *, finished: bool, limit: int = FOLLOW_CHUNK_BYTES
) -> LogChunk:
    """What the file holds past `offset` (at most `limit` bytes). While the pod still writes,
    only whole lines are returned, so a multi-byte character is never cut in two."""
    size = _size(path)
    offset = min(max(offset, 0), size)
    if offset >= size:
        return LogChunk("", offset, size)
    with path.open("rb") as log:
        log.seek(offset)
        data = log.read(min(size - offset, limit))
    if not finished or len(data) == limit:
        cut = data.rfind(b"\n") + 1
        if cut:
            data = data[:cut]
        elif not finished and len(data) < limit:
            data = b""
    return LogChunk(data.decode("utf-8", errors="replace"), offset + len(data), size)


def log_open(path: Path):
    """A binary file object for a download, or None if the pod wrote no log."""
    try:
        return open(path, "rb")  # noqa: SIM115 (the response closes it)
    except FileNotFoundError:
        return None


def log_exists(path: Path) -> bool:
    return os.path.isfile(path)
