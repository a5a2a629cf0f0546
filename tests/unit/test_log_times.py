"""When a pod's log lines were written: the shim's LogWriter keeps `<log>.times` beside the
log (a mark per second of output), and apps/agent/logs.py reads lines back with their times
and by time window. The log file itself stays what the pod wrote."""

from __future__ import annotations

import os
from datetime import UTC
from zoneinfo import ZoneInfo

import pytest

from apps.agent import logs, shim

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


@pytest.fixture
def clock(monkeypatch):
    now = [T0]
    monkeypatch.setattr(shim.time, "time", lambda: now[0])
    return now


def write(path, clock, *chunks: tuple[float, bytes]) -> None:
    writer = shim.LogWriter(path, max_bytes=10_000)
    for at, data in chunks:
        clock[0] = T0 + at
        writer.write(data)
    writer.close()


def test_it_marks_each_second_of_output_and_leaves_the_log_as_written(tmp_path, clock):
    log = tmp_path / "pod.log"
    write(
        log,
        clock,
        (0.1, b"step 1\n"),
        (0.7, b"step 2\n"),  # same second: no new mark
        (3.2, b"step 3\nstep"),
        (5.0, b" 4\n"),  # a line split across writes
    )
    assert log.read_bytes() == b"step 1\nstep 2\nstep 3\nstep 4\n"
    offsets, times = logs.log_times(log)
    assert offsets == [0, 14, 25] and times == [T0 + 0.1, T0 + 3.2, T0 + 5.0]
    text = log.read_text()
    lines = logs.timed_lines(log, text, len(text))
    assert lines == [
        (T0 + 0.1, "step 1\n"),
        (T0 + 0.1, "step 2\n"),
        (T0 + 3.2, "step 3\n"),
        (T0 + 3.2, "step 4\n"),  # a line counts from when it began
    ]


def test_it_stamps_lines_in_the_readers_zone_and_tails_keep_their_times(tmp_path, clock):
    log = tmp_path / "pod.log"
    write(log, clock, (0, b"a\n"), (61, b"b\n"))
    text, end = logs.log_tail(log, 1)
    assert logs.stamped(log, text, end, UTC) == "2027-01-15 08:01:01 b\n"
    assert logs.stamped(log, text, end, ZoneInfo("Asia/Shanghai")) == "2027-01-15 16:01:01 b\n"


def test_a_log_without_marks_is_stamped_with_blanks(tmp_path):
    log = tmp_path / "old.log"
    log.write_text("before marks\n")
    assert logs.stamped(log, "before marks\n", 13, UTC) == " " * 20 + "before marks\n"


def test_a_window_holds_the_lines_that_began_in_it(tmp_path, clock):
    log = tmp_path / "pod.log"
    write(
        log,
        clock,
        (0, b"boot\n"),
        (10, b"epoch 1\nepo"),
        (20, b"ch 2\nepoch 3\n"),
        (30, b"done\n"),
    )
    window = logs.log_window
    assert window(log, since=T0 + 5, until=T0 + 25, lines=100) == ["epoch 1", "epoch 2", "epoch 3"]
    # "epoch 2" began at 10 s: a window from 15 s leaves it out, and keeps epoch 3
    assert window(log, since=T0 + 15, until=T0 + 25, lines=100) == ["epoch 3"]
    assert window(log, since=T0 + 5, until=T0 + 12, lines=100) == ["epoch 1", "epoch 2"]
    assert window(log, since=T0, until=T0 + 100, lines=2) == ["epoch 3", "done"]
    assert window(log, since=T0 + 31, until=T0 + 100, lines=100) == []
    assert window(tmp_path / "none.log", since=0, until=T0, lines=5) == []


def test_a_window_over_a_log_without_marks_goes_by_when_it_last_changed(tmp_path):
    log = tmp_path / "old.log"
    log.write_text("one\ntwo\n")
    os.utime(log, (T0, T0))
    assert logs.log_window(log, since=T0 - 1, until=T0 + 1, lines=10) == ["one", "two"]
    assert logs.log_window(log, since=T0 + 1, until=T0 + 2, lines=10) == []


def test_notes_and_the_truncation_notice_are_marked_too(tmp_path, clock):
    log = tmp_path / "pod.log"
    writer = shim.LogWriter(log, max_bytes=4)
    writer.note("starting")
    clock[0] = T0 + 2
    writer.write(b"123456\n")
    writer.close()
    offsets, times = logs.log_times(log)
    assert len(offsets) == 2 and times == [T0, T0 + 2]
    assert log.read_bytes().startswith(b"[paiweb] ")


def test_marks_read_from_the_end_give_the_same_times_as_the_whole_file(tmp_path, clock):
    log = tmp_path / "pod.log"
    writer = shim.LogWriter(log, max_bytes=10**7)
    for i in range(20_000):  # a line a second for five and a half hours
        clock[0] = T0 + i
        writer.write(f"line {i}\n".encode())
    writer.close()
    whole = logs.log_times(log)
    assert len(whole[0]) == 20_000 and (log.parent / "pod.log.times").stat().st_size > 64 * 1024
    for offset in (0, 5, 100_000, whole[0][-1], whole[0][-1] + 3):
        tail = logs.log_times(log, from_offset=offset)
        assert len(tail[0]) < len(whole[0]) or offset < 1000
        assert logs.written_at(tail, offset) == logs.written_at(whole, offset), offset


def test_it_leaves_the_log_readable_by_the_web_server_whatever_the_shims_umask(tmp_path, clock):
    # The shim runs with umask 077; under compose the agent is root and the web server, which
    # reads the log and its marks, is another user.
    log = tmp_path / "pod.log"
    previous = os.umask(0o077)
    try:
        write(log, clock, (0, b"a\n"))
    finally:
        os.umask(previous)
    for path in (log, log.with_name(log.name + shim.TIMES_SUFFIX)):
        assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("tail", [1, 2, 7, 100, 5_000])
def test_a_tail_is_the_last_lines_across_the_blocks_it_reads(tmp_path, tail):
    """The tail is read backwards a block at a time: lines that straddle blocks, a line
    longer than a block and a last line without its newline come back whole."""
    lines = [b"x" * (n * 997 % 70_000) + b"\n" for n in range(300)] + [b"unfinished"]
    log = tmp_path / "pod.log"
    log.write_bytes(b"".join(lines))
    text, end = logs.log_tail(log, tail)
    assert text.encode() == b"".join(lines[-tail:]) and end == log.stat().st_size
