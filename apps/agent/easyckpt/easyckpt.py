"""EasyCkpt-style checkpoints for training code that paiweb runs (stdlib only).

paiweb puts this directory on every pod's PYTHONPATH and sets PAIWEB_CHECKPOINT_DIR to a
directory of the job that all its attempts share, so a restarted or requeued pod finds
what the one before it saved:

    import easyckpt

    resumed = easyckpt.load_latest()           # None, or (step, state)
    step, state = resumed if resumed else (0, fresh_state())
    ...
    easyckpt.save(state, step)                 # returns at once; written in the background
    ...
    easyckpt.wait()                            # before exiting: flush what is pending

save() pickles the state immediately (later changes to it do not leak into the checkpoint)
and a background thread writes it atomically: a temporary file in the same directory,
fsync, rename to `ckpt-<step>.pkl`, fsync the directory. A reader therefore sees a whole
checkpoint or none, and each file carries a SHA-256 of its payload so a damaged one is
skipped. The newest PAIWEB_CKPT_KEEP (default 3) whole ones are kept: a damaged one never
counts among them (it is removed), so damaged saves never push out the last loadable one.
Each saved checkpoint appends a line to `manifest.jsonl`, which the node agent watches to
show checkpoints in the console.

Save from one rank (RANK 0) when several pods share the directory.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import pickle
import queue
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["save", "wait", "load_latest", "checkpoint_dir", "CheckpointError"]

MAGIC = b"EASYCKPT1\n"
MANIFEST = "manifest.jsonl"
NAME = re.compile(r"^ckpt-(\d{12})\.pkl$")


class CheckpointError(RuntimeError):
    """A background save failed; raised by the next wait() or save()."""


def checkpoint_dir() -> Path:
    return Path(os.environ.get("PAIWEB_CHECKPOINT_DIR") or "checkpoints")


def _keep() -> int:
    try:
        return max(int(os.environ.get("PAIWEB_CKPT_KEEP", "3")), 1)
    except ValueError:
        return 3


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(directory: Path, step: int, payload: bytes, keep: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"ckpt-{step:012d}.pkl"
    tmp = directory / f".{final.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    digest = hashlib.sha256(payload).hexdigest().encode()
    try:
        with open(tmp, "wb") as out:
            out.write(MAGIC + digest + b"\n" + payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(directory)
    line = json.dumps(
        {"step": step, "file": final.name, "bytes": final.stat().st_size, "time": time.time()}
    )
    with open(directory / MANIFEST, "a", encoding="utf-8") as manifest:
        manifest.write(line + "\n")
        manifest.flush()
        os.fsync(manifest.fileno())
    _whole.add(_identity(final))
    _clean(directory, keep)


# Files known whole (written by this process, or read and checked), by (name, inode, size,
# mtime): the cleanup after each save reads only the files it has not checked yet.
_whole: set[tuple[str, int, int, int]] = set()


def _identity(path: Path) -> tuple[str, int, int, int]:
    info = path.stat()
    return (path.name, info.st_ino, info.st_size, info.st_mtime_ns)


def _is_whole(path: Path) -> bool:
    try:
        identity = _identity(path)
    except OSError:
        return False
    if identity in _whole:
        return True
    if _read(path) is None:
        return False
    _whole.add(identity)
    return True


def _clean(directory: Path, keep: int) -> None:
    """Keep the newest `keep` whole checkpoints; remove the older files and the damaged
    ones (which load_latest would pass over), so a run of damaged saves never pushes out
    the last checkpoint a restart can load."""
    kept = 0
    for _, path in reversed(_complete(directory)):
        if kept < keep and _is_whole(path):
            kept += 1
        else:
            path.unlink(missing_ok=True)


def _complete(directory: Path) -> list[tuple[int, Path]]:
    """Finished checkpoint files, oldest step first (temporary files never match)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), directory / name) for name in names if (m := NAME.match(name))]
    return sorted(found)


class _Writer:
    """One background thread writing saves in order."""

    def __init__(self) -> None:
        self.queue: queue.Queue[tuple[Path, int, bytes, int] | None] = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="easyckpt", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is not None:
                    _write(*item)
            except BaseException as exc:  # kept for wait() to raise in the caller's thread
                self.error = exc
            finally:
                self.queue.task_done()

    def raise_error(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise CheckpointError(f"saving a checkpoint failed: {error!r}") from error


_lock = threading.Lock()
_writer: _Writer | None = None


def _get_writer() -> _Writer:
    global _writer
    with _lock:
        if _writer is None:
            _writer = _Writer()
            atexit.register(wait)
        return _writer


def save(state: Any, step: int) -> None:
    """Checkpoint `state` as of `step`, asynchronously. The state is pickled now."""
    if int(step) < 0:
        raise ValueError("step must be ≥ 0")
    writer = _get_writer()
    writer.raise_error()
    payload = pickle.dumps((int(step), state), protocol=pickle.HIGHEST_PROTOCOL)
    writer.queue.put((checkpoint_dir(), int(step), payload, _keep()))


def wait() -> None:
    """Block until every save() so far is on disk; raise CheckpointError if one failed."""
    if _writer is None:
        return
    _writer.queue.join()
    _writer.raise_error()


def _read(path: Path) -> tuple[int, Any] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(MAGIC):
        return None
    header, _, payload = data[len(MAGIC) :].partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != header:
        return None
    try:
        step, state = pickle.loads(payload)
    except Exception:
        return None
    return int(step), state


def _report_resumed(
    directory: Path, loaded: Path | None, step: int | None, skipped: list[str]
) -> None:
    """Tell the node agent, through the manifest, what a load passed over and what it
    resumed from instead: the platform named the newest recorded step before the pod ran,
    and revises that, and the work lost, from this line. Only in a pod (best effort)."""
    if not os.environ.get("PAIWEB_CHECKPOINT_DIR"):
        return
    line = json.dumps(
        {
            "resumed": step,
            "file": loaded.name if loaded is not None else None,
            "damaged": skipped,
            "time": time.time(),
        }
    )
    try:
        with open(directory / MANIFEST, "a", encoding="utf-8") as manifest:
            manifest.write(line + "\n")
    except OSError:
        pass


def load_latest() -> tuple[int, Any] | None:
    """(step, state) of the newest complete checkpoint, or None when there is none. Each
    newer file passed over (damaged: its SHA-256 or its pickle does not check) is named on
    stderr, in the pod's log, with the step resumed from instead, and in the manifest for
    the node agent."""
    skipped = []
    directory = checkpoint_dir()
    path = None
    for _, path in reversed(_complete(directory)):
        if (loaded := _read(path)) is not None:
            break
        skipped.append(path.name)
    else:
        loaded, path = None, None
    if skipped:
        _report_resumed(directory, path, loaded[0] if loaded is not None else None, skipped)
        instead = f"step {loaded[0]}" if loaded is not None else "the start"
        print(
            f"easyckpt: {', '.join(skipped)} damaged (checksum or contents): resuming from "
            f"{instead}",
            file=sys.stderr,
            flush=True,
        )
    return loaded
