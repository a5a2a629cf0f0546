"""disk_usage and remove_tree on hostile trees (no database): links, FIFOs, devices, hard
links, deep trees, many files; and the housekeeping thread's loop."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from apps.agent import housekeeping
from apps.agent.housekeeping import DiskUsage, disk_usage, remove_tree


def blocks(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))  # random: never sparse, never compressed away
    return path


def all_entries(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk never follows links here
        found += [Path(dirpath) / name for name in (*dirnames, *filenames)]
    return found


def make_deep(top: Path, depth: int) -> None:
    """top/d/d/…/d (depth levels) with a 1000-byte file at the bottom, made relative to
    each directory's fd: the whole path is far longer than PATH_MAX."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"x" * 1000)
        os.close(out)
    finally:
        os.close(fd)


def test_it_counts_files_of_known_size_exactly(tmp_path):
    root = tmp_path / "job"
    sizes = {"a.bin": 10_000, "sub/b.bin": 5_000, "sub/deeper/c.bin": 123_456, "empty": 0}
    for name, size in sizes.items():
        write(root / name, size)
    usage = disk_usage(root)
    entries = all_entries(root)
    assert len(entries) == 6  # 4 files, sub and sub/deeper
    assert usage == DiskUsage(
        bytes=blocks(root) + sum(blocks(p) for p in entries), files=6, complete=True
    )
    assert usage.bytes >= sum(sizes.values())  # allocated space holds at least the data
    assert usage.bytes < sum(sizes.values()) + 64 * 1024  # and not much more


def test_it_counts_a_missing_path_as_nothing_and_a_file_as_itself(tmp_path):
    assert disk_usage(tmp_path / "nope") == DiskUsage(0, 0, True)
    path = write(tmp_path / "one.bin", 8192)
    assert disk_usage(path) == DiskUsage(blocks(path), 1, True)


def test_it_never_follows_a_symlink(tmp_path):
    outside = tmp_path / "outside"
    write(outside / "big.bin", 2 * 1024 * 1024)
    root = tmp_path / "job"
    write(root / "small.bin", 100)
    (root / "slash").symlink_to("/")
    (root / "out").symlink_to(outside)
    (root / "big-link").symlink_to(outside / "big.bin")
    usage = disk_usage(root)
    assert usage.files == 4 and usage.complete
    assert usage.bytes == blocks(root) + sum(blocks(p) for p in root.iterdir())
    assert usage.bytes < 64 * 1024  # neither / nor the 2 MiB file outside
    # a path that is itself a link is the link, not its target
    assert disk_usage(root / "out") == DiskUsage(blocks(root / "out"), 1, True)


def test_it_counts_a_fifo_and_a_device_without_opening_them(tmp_path, monkeypatch):
    root = tmp_path / "job"
    root.mkdir()
    os.mkfifo(root / "fifo")
    names = ["fifo"]
    if os.geteuid() == 0:
        os.mknod(root / "null", 0o600 | 0o020000, os.makedev(1, 3))  # a char device
        names.append("null")
    opened = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    result = []
    worker = threading.Thread(target=lambda: result.append(disk_usage(root)), daemon=True)
    worker.start()
    worker.join(10)
    assert result, "disk_usage hung on a FIFO"
    assert result[0] == DiskUsage(blocks(root), len(names), True)
    assert opened == [str(root)]  # only the directory


def test_it_stops_at_max_entries(tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    for i in range(50):
        (root / f"f{i}").write_bytes(b"x")
    assert disk_usage(root, max_entries=50) == disk_usage(root)
    assert disk_usage(root).files == 50 and disk_usage(root).complete
    for bound in (0, 1, 10, 49):
        usage = disk_usage(root, max_entries=bound)
        assert usage.files == bound and not usage.complete
    # the bound holds across directories too
    for i in range(5):
        write(root / f"d{i}" / "inner", 10)
    usage = disk_usage(root, max_entries=52)
    assert usage.files == 52 and not usage.complete


def test_it_counts_a_hard_linked_file_once(tmp_path):
    root = tmp_path / "job"
    big = write(root / "big.bin", 1024 * 1024)
    for i in range(20):
        os.link(big, root / f"link{i}")
    usage = disk_usage(root)
    assert usage.files == 21
    assert usage.bytes == blocks(root) + blocks(big)


def test_it_walks_a_tree_deeper_than_path_max(tmp_path):
    top = tmp_path / "deep"
    depth = 3000  # far more than PATH_MAX allows as one path, and than Python's recursion
    make_deep(top, depth)
    usage = disk_usage(top)
    assert usage.files == depth + 1 and usage.complete
    assert usage.bytes >= 1000
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree(parent, "deep")
    finally:
        os.close(parent)
    assert not top.exists()


def test_remove_tree_never_follows_a_symlink_out(tmp_path):
    outside = tmp_path / "outside"
    write(outside / "keep.txt", 10)
    (outside / "sub").mkdir()
    root = tmp_path / "job"
    write(root / "a" / "b" / "file", 10)
    (root / "a" / "out").symlink_to(outside)
    (root / "a" / "b" / "slash").symlink_to("/")
    (root / "file-link").symlink_to(outside / "keep.txt")
    os.mkfifo(root / "a" / "fifo")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree(parent, "job")
        remove_tree(parent, "job")  # gone already: nothing to do
        (tmp_path / "link-to-outside").symlink_to(outside)
        remove_tree(parent, "link-to-outside")  # a link itself is unlinked, never entered
    finally:
        os.close(parent)
    assert not root.exists() and not (tmp_path / "link-to-outside").exists()
    assert (outside / "keep.txt").stat().st_size == 10 and (outside / "sub").is_dir()


def test_the_thread_runs_rounds_and_survives_errors(monkeypatch, settings, tmp_path):
    settings.POD_WORK_ROOT = tmp_path
    settings.POD_WORK_RETENTION_HOURS = 3
    settings.POD_KEEP_CHECKPOINTS = 4
    calls = []
    two = threading.Event()

    def sweep(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise RuntimeError("a busy database")
        two.set()
        return housekeeping.SweepResult()

    closed = []
    monkeypatch.setattr(housekeeping, "job_dirs_sweep", sweep)
    monkeypatch.setattr(
        housekeeping,
        "connection",
        type("Connection", (), {"close": staticmethod(lambda: closed.append(1))}),
    )
    monkeypatch.setattr(housekeeping, "_thread", None)
    stop = threading.Event()
    thread = housekeeping.start_housekeeping(interval=0.01, stop=stop)
    try:
        assert thread.daemon
        assert housekeeping.start_housekeeping(interval=0.01) is thread  # once per process
        assert two.wait(10), "the thread died after an error"
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert calls[0]["root"] == Path(tmp_path) and calls[0]["keep_checkpoints"] == 4
    assert calls[0]["retention"].total_seconds() == 3 * 3600
    assert len(closed) >= 2  # the connection is closed after every round, failed or not


@pytest.mark.parametrize(
    "value, text",
    [
        (None, "—"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (12.3 * 1024**2, "12.3 MiB"),
        (5 * 1024**4, "5.0 TiB"),
    ],
)
def test_binary_size(value, text):
    from apps.jobs.templatetags.jobs_extras import binary_size

    assert binary_size(value) == text
