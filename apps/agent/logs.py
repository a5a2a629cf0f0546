"""Reading pods' log files: the last N lines, and what was added since a byte offset.

The agent writes each pod's stdout and stderr to POD_WORK_ROOT/<job>/logs/<pod>.log (outside
anything the sandboxed pod can write). The console reads the same file, so the web server
must see POD_WORK_ROOT: the same host, or shared storage when agents run elsewhere.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path

from apps.agent import shim
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
    blocks: list[bytes] = []  # read backwards, a block at a time, each copied once
    newlines = 0
    with path.open("rb") as log:
        end = size
        while end > 0 and newlines <= lines:
            start = max(end - TAIL_BLOCK, 0)
            log.seek(start)
            blocks.append(log.read(end - start))
            newlines += blocks[-1].count(b"\n")
            end = start
    kept = b"".join(reversed(blocks)).splitlines(keepends=True)[-lines:]
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


# --- when lines were written (the shim's `<log>.times`, see shim.LogWriter) ------------------


def log_times(path: Path, *, from_offset: int | None = None) -> tuple[list[int], list[float]]:
    """The log's time marks: byte offsets (ascending) and the time each was written; empty
    for a log written before there were marks, or none at all. A torn last line is left out.
    With `from_offset`, only the marks from the last one not past that offset on, read from
    the end of the file (a page that follows the log reads what is new, not all of it)."""
    try:
        marks = path.with_name(path.name + shim.TIMES_SUFFIX).open("rb")
    except FileNotFoundError:
        return [], []
    with marks:
        end = os.fstat(marks.fileno()).st_size
        data, start = b"", end
        while start > 0:
            start = max(start - TAIL_BLOCK, 0) if from_offset is not None else 0
            marks.seek(start)
            data = marks.read(end - start)
            if start and (first := _first_mark(data)) is not None and first <= from_offset:
                break
    if start:  # the block may begin inside a line
        data = data[data.find(b"\n") + 1 :]
    offsets: list[int] = []
    times: list[float] = []
    for line in data.split(b"\n"):
        try:
            offset, at = line.split(b" ")
            mark = int(offset), float(at)
        except ValueError:
            continue
        if not offsets or mark[0] >= offsets[-1]:
            offsets.append(mark[0])
            times.append(mark[1])
    return offsets, times


def _first_mark(block: bytes) -> int | None:
    """The offset of the first whole mark line of a block read from inside the file."""
    for line in block.split(b"\n")[1:]:
        try:
            return int(line.split(b" ")[0])
        except ValueError:
            continue
    return None


def written_at(marks: tuple[list[int], list[float]], offset: int) -> float | None:
    """When the byte at `offset` was written: the time of the last mark not past it."""
    offsets, times = marks
    index = bisect.bisect_right(offsets, offset) - 1
    return times[index] if index >= 0 else None


def timed_lines(path: Path, text: str, end: int) -> list[tuple[float | None, str]]:
    """The lines of `text`, which ends at byte `end` of the log, each with when it began."""
    lines = text.splitlines(keepends=True)
    starts: list[int] = []
    at = end
    for line in reversed(lines):
        at -= len(line.encode("utf-8", errors="replace"))
        starts.append(at)
    starts.reverse()
    marks = log_times(path, from_offset=at)
    return [(written_at(marks, start), line) for start, line in zip(starts, lines, strict=True)]


def stamped(path: Path, text: str, end: int, zone: tzinfo) -> str:
    """`text` with each line prefixed by its time in `zone` (24-hour, to the second), or by
    blanks of the same width where the log has no time for it."""
    out = []
    for at, line in timed_lines(path, text, end):
        when = datetime.fromtimestamp(at, zone).strftime(STAMP) if at is not None else ""
        out.append(f"{when:<{STAMP_WIDTH}} {line}")
    return "".join(out)


STAMP = "%Y-%m-%d %H:%M:%S"
STAMP_WIDTH = 19


def log_window(path: Path, *, since: float, until: float, lines: int) -> list[str]:
    """The last `lines` lines written between `since` and `until` (epoch seconds), as
    GetPodLogs' StartTime and EndTime ask; a log without time marks counts as written
    when its file last changed."""
    marks = log_times(path)
    size = _size(path)
    offsets, times = marks
    if not offsets:
        try:
            changed = path.stat().st_mtime
        except FileNotFoundError:
            return []
        offsets, times = [0], [changed]
    first = bisect.bisect_left(times, since)  # marks are in time order, as written
    past = bisect.bisect_right(times, until)
    start = offsets[first] if first < len(offsets) else size
    stop = offsets[past] if past < len(offsets) else size
    if stop <= start:
        return []
    with path.open("rb") as log:
        # a line belongs to when it began: one that began before `start` is not in the
        # window, one that began before `stop` is, whole
        log.seek(max(start - 1, 0))
        before = log.read(1) if start else b"\n"
        data = log.read(stop - start)
        if data and not data.endswith(b"\n"):
            rest = log.read(TAIL_BLOCK)
            data += rest[: rest.find(b"\n") + 1] if b"\n" in rest else rest
    if before != b"\n":
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def log_open(path: Path):
    """A binary file object for a download, or None if the pod wrote no log."""
    try:
        return open(path, "rb")  # noqa: SIM115 (the response closes it)
    except FileNotFoundError:
        return None


def log_exists(path: Path) -> bool:
    return os.path.isfile(path)
