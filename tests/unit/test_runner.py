"""The pod runner on its own (no database): real processes, real signals, real bubblewrap.

The sandboxed tests need bubblewrap (`apt-get install bubblewrap`; CI installs it) and run
as root (as CI does): they fail, not skip, on a host that cannot isolate pods.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from apps.agent import runner, shim

SEED_COMMAND = "echo 'Hello World' && ls -R /mnt/data/ && sleep 1 && echo 'DONE'"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
MODES = ["none", "strict"]
POD_UID = 234_567


def needs_bwrap(test):
    return test


@pytest.fixture
def root():
    """A scratch directory outside /tmp: the sandbox's /tmp is private anyway, so hiding is
    only proven on paths the sandbox would otherwise show."""
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.cwd()
    path = Path(tempfile.mkdtemp(prefix="pw-runner-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def spec(root: Path, command: str, *, mode: str = "none", name: str = "pod-0", **kwargs):
    """A pod under `root`: bare ("none"), or isolated as the agent does it ("strict": own
    uid, bwrap, seccomp; the agent adds the job's netns and cgroup, tested elsewhere)."""
    work_dir = root / "pods" / "job-a" / name
    isolation = None
    if mode == "strict":
        isolation = runner.isolation_status("strict")
        assert isolation.bwrap and isolation.root, isolation.detail
        kwargs.setdefault("uid", POD_UID)
        for path in (work_dir, *kwargs.get("writable", ()), kwargs.get("data_dir")):
            if path is not None:
                Path(path).mkdir(parents=True, exist_ok=True)
                os.chown(path, POD_UID, POD_UID)
    work_dir.mkdir(parents=True, exist_ok=True)
    return runner.PodSpec(
        name=name,
        command=command,
        work_dir=work_dir,
        log_path=root / "pods" / "job-a" / "logs" / f"{name}.log",
        env={**ENV, **kwargs.pop("env", {})},
        isolation=isolation,
        **kwargs,
    )


def run(pod_spec: runner.PodSpec) -> tuple[int, str]:
    process = runner.start(pod_spec)
    process.wait(timeout=30)
    code = process.finish()
    return code, pod_spec.log_path.read_text()


def require_bwrap_works() -> None:
    status = runner.isolation_status("strict")
    assert status.complete, f"this host cannot isolate pods: {status.detail}"


@needs_bwrap
def test_it_runs_the_seed_command_in_the_sandbox(root):
    require_bwrap_works()
    data = root / "pods" / "job-a" / "data"
    (data / "dataset").mkdir(parents=True)
    (data / "dataset" / "part-0.csv").write_text("x,y\n")
    code, log = run(spec(root, SEED_COMMAND, mode="strict", data_dir=data))
    assert code == 0
    assert "Hello World" in log and "DONE" in log
    assert "/mnt/data/dataset:" in log and "part-0.csv" in log
    assert "exited with code 0" in log


@pytest.mark.parametrize("mode", MODES)
def test_it_reports_a_failing_commands_exit_code(root, mode):
    code, log = run(spec(root, "echo about to fail; exit 3", mode=mode))
    assert code == 3
    assert "about to fail" in log and "exited with code 3" in log


@pytest.mark.parametrize("mode", MODES)
def test_it_escalates_to_sigkill_after_the_grace(root, mode):
    command = "trap 'echo got TERM' TERM; echo ready; while true; do sleep 0.1; done"
    pod_spec = spec(root, command, mode=mode)
    process = runner.start(pod_spec)
    _wait_for_text(pod_spec.log_path, "ready")
    started = time.monotonic()
    code = process.stop(grace=1.0)
    elapsed = time.monotonic() - started
    process.finish()
    log = pod_spec.log_path.read_text()
    assert code == 137  # 128 + SIGKILL
    assert 0.9 <= elapsed < 5
    assert "got TERM" in log and "SIGKILL" in log
    assert not runner.descendants(process.pid)


@pytest.mark.parametrize("mode", MODES)
def test_it_lets_a_pod_exit_on_sigterm_within_the_grace(root, mode):
    command = "trap 'echo saving; exit 7' TERM; echo ready; while true; do sleep 0.1; done"
    pod_spec = spec(root, command, mode=mode)
    process = runner.start(pod_spec)
    _wait_for_text(pod_spec.log_path, "ready")
    started = time.monotonic()
    assert process.stop(grace=10) == 7
    assert time.monotonic() - started < 3
    process.finish()
    assert "saving" in pod_spec.log_path.read_text()


@needs_bwrap
def test_it_hides_other_jobs_and_paiwebs_files_from_a_sandboxed_pod(root):
    require_bwrap_works()
    var = root / "var"
    (var).mkdir()
    (var / "paiweb.sqlite3").write_text("the database")
    repo = root / "repo"
    (repo / "paiweb").mkdir(parents=True)
    (repo / "paiweb" / "settings.py").write_text("SECRET_KEY = 'x'")
    other = root / "pods" / "job-b" / "pod-9"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("job b's secret")
    (root / "pods" / "job-b" / "checkpoints").mkdir()
    command = (
        f"cat {other / 'secret.txt'}; echo rc=$?; "
        f"cat {var / 'paiweb.sqlite3'}; echo rc=$?; "
        f"cat {repo / 'paiweb' / 'settings.py'}; echo rc=$?; "
        f"echo listing:$(ls {root / 'pods'} | tr '\\n' ' '); "
        f"touch {root / 'pods' / 'job-b' / 'checkpoints' / 'x'}; echo rc=$?; "
        "echo mine > own.txt && cat own.txt; "
        "touch /usr/paiweb-evil; echo rc=$?"
    )
    code, log = run(spec(root, command, mode="strict", writable=()))
    assert code == 0
    assert "job b's secret" not in log and "the database" not in log and "SECRET_KEY" not in log
    assert log.count("rc=1") == 5  # three reads, a write elsewhere, a write to the host
    assert "listing:job-a\n" in log  # the pods root shows this job only
    assert not Path("/usr/paiweb-evil").exists()
    assert (root / "pods" / "job-a" / "pod-0" / "own.txt").read_text() == "mine\n"


@pytest.mark.parametrize("mode", MODES)
def test_it_caps_the_log_with_a_notice(root, mode):
    code, log = run(
        spec(
            root,
            "head -c 50000 /dev/zero | tr '\\0' x; echo; echo the end",
            mode=mode,
            log_max_bytes=4096,
        )
    )
    assert code == 0
    assert "[log truncated: output beyond POD_LOG_MAX_BYTES=4096 bytes is discarded]" in log
    assert "the end" not in log
    assert "exited with code 0" in log  # paiweb's own notes are always kept
    assert len(log.encode()) < 4096 + 400


FLOOD = """
import os, sys, time
chunk, written, end = b"y" * 65536, 0, time.monotonic() + 3
while time.monotonic() < end:
    written += os.write(1, chunk)
open("written", "w").write(str(written))
"""


@pytest.mark.parametrize("mode", MODES)
def test_output_past_the_cap_is_read_no_faster_than_the_discard_rate(root, mode):
    """Output past the log's cap is thrown away: the shim reads it at DISCARD_RATE, so a
    pod writing flat out waits on its pipe instead of making the shim spend the host's CPU
    (read as fast as it comes, it was gigabytes in these 3 s)."""
    pod = spec(root, f"python3 -c '{FLOOD}'", mode=mode, log_max_bytes=4096)
    started = time.monotonic()
    code, log = run(pod)
    elapsed = time.monotonic() - started
    assert code == 0, log
    written = int((pod.work_dir / "written").read_text())
    pipe = 1024 * 1024  # the most a pipe holds (pipe-max-size)
    assert 3 * 65536 < written <= 4096 + shim.DISCARD_RATE * (elapsed + 1) + pipe
    assert "exited with code 0" in log


@pytest.mark.parametrize("mode", MODES)
def test_it_limits_a_pods_address_space_without_a_cgroup(root, mode):
    if shutil.which("prlimit") is None:
        pytest.fail("prlimit (util-linux) is missing")
    command = "python3 -c 'b = bytearray(600 * 1024 * 1024); print(\"allocated\")'"
    code, log = run(spec(root, command, mode=mode, memory_mib=256))
    assert code == 1 and "MemoryError" in log and "allocated" not in log


@pytest.mark.parametrize("mode", MODES)
def test_it_gives_the_pod_only_its_own_environment(root, mode):
    code, log = run(spec(root, "env | sort", mode=mode, env={"RANK": "2"}))
    assert code == 0
    assert "RANK=2" in log
    assert "DJANGO_SETTINGS_MODULE" not in log and "DATABASE_URL" not in log


def test_it_reads_each_manifest_line_once(root):
    directory = root / "ckpt"
    directory.mkdir()
    manifest = directory / "manifest.jsonl"
    manifest.write_text(json.dumps({"step": 1, "file": "a", "bytes": 1, "time": 1.0}) + "\n")
    reader = runner.ManifestReader(directory)  # what was there before is history
    assert reader.new_entries() == []
    with manifest.open("a") as out:
        out.write(json.dumps({"step": 2, "file": "b", "bytes": 5, "time": 2.0}) + "\n")
        out.write("not json\n")
        out.write('{"step": 3, "file": "c"')  # half a line: not yet
    assert [e["step"] for e in reader.new_entries()] == [2]
    with manifest.open("a") as out:
        out.write(', "bytes": 7, "time": 3.0}\n')
    assert reader.new_entries() == [{"step": 3, "file": "c", "bytes": 7, "time": 3.0}]
    assert reader.new_entries() == []


def test_it_reads_the_lines_after_the_offset_it_is_given(root):
    """The agent notes where the manifest ended before it starts the pod: what the pod
    writes at once is new, what an earlier attempt wrote before stays history."""
    directory = root / "ckpt"
    directory.mkdir()
    manifest = directory / "manifest.jsonl"
    manifest.write_text(json.dumps({"step": 1, "file": "a", "bytes": 1, "time": 1.0}) + "\n")
    start = manifest.stat().st_size
    with manifest.open("a") as out:  # the new pod's first instant, before its reader is made
        out.write(json.dumps({"step": 2, "file": "b", "bytes": 5, "time": 2.0}) + "\n")
    reader = runner.ManifestReader(directory, offset=start)
    assert [e["step"] for e in reader.new_entries()] == [2]
    assert reader.new_entries() == []
    manifest.write_text("")  # truncated: from its end
    assert runner.ManifestReader(directory, offset=start).new_entries() == []


def test_a_checkpoint_stamped_ahead_of_the_clock_is_taken_as_read_now(root):
    directory = root / "ckpt"
    directory.mkdir()
    reader = runner.ManifestReader(directory)
    ahead = time.time() + 3600
    line = json.dumps({"step": 5, "file": "ckpt-000000000005.pkl", "time": ahead})
    (directory / "manifest.jsonl").write_text(line + "\n")
    before = time.time()
    [entry] = reader.new_entries()
    assert before <= entry["time"] <= time.time()
    assert reader.problems == [
        "checkpoint 'ckpt-000000000005.pkl' is stamped ahead of this host's clock: "
        "recorded at the time it was read"
    ]
    unannounced = directory / "ckpt-000000000006.pkl"  # a file's time, set ahead too
    unannounced.write_bytes(b"x")
    os.utime(unannounced, (ahead, ahead))
    [found] = reader.unannounced()
    assert found["step"] == 6 and found["time"] <= time.time()


def test_it_reads_what_an_easyckpt_load_passed_over(root, monkeypatch):
    """EasyCkpt's load, passing over a damaged checkpoint, says so in the manifest; the
    reader gives that word back, and skips a malformed or escaping one with a problem."""
    from apps.agent.easyckpt import easyckpt

    directory = root / "ckpt"
    monkeypatch.setenv("PAIWEB_CHECKPOINT_DIR", str(directory))
    for step in (1, 2):
        easyckpt.save({"step": step}, step)
    easyckpt.wait()
    reader = runner.ManifestReader(directory)
    two = directory / "ckpt-000000000002.pkl"
    two.write_bytes(two.read_bytes()[:-5] + b"xxxxx")
    assert easyckpt.load_latest() == (1, {"step": 1})
    assert reader.new_entries() == [
        {"resumed": 1, "file": "ckpt-000000000001.pkl", "damaged": ["ckpt-000000000002.pkl"]}
    ]
    with (directory / "manifest.jsonl").open("a") as out:
        for record in (
            {"resumed": None, "file": None, "damaged": ["ckpt-000000000001.pkl"]},
            {"resumed": 1, "file": None, "damaged": ["x"]},
            {"resumed": None, "file": "x", "damaged": ["x"]},
            {"resumed": 1, "file": "x", "damaged": []},
            {"resumed": 1, "file": "x", "damaged": "x"},
            {"resumed": -1, "file": "x", "damaged": ["x"]},
            {"resumed": 1, "file": "x", "damaged": ["../../etc/passwd"]},
        ):
            out.write(json.dumps(record) + "\n")
    assert reader.new_entries() == [
        {"resumed": None, "file": None, "damaged": ["ckpt-000000000001.pkl"]}
    ]
    assert reader.problems == [
        "a line of manifest.jsonl is not a checkpoint record: skipped",
        "checkpoint file '../../etc/passwd' is not inside the checkpoint directory: skipped",
    ]


def test_it_takes_at_most_the_newest_records_of_a_burst(root):
    directory = root / "ckpt"
    directory.mkdir()
    reader = runner.ManifestReader(directory)
    lines = [json.dumps({"step": i, "file": f"f{i}", "time": 1.0}) + "\n" for i in range(1000)]
    (directory / "manifest.jsonl").write_text("".join(lines))
    steps = [e["step"] for e in reader.new_entries()]
    assert steps == list(range(1000 - runner.MANIFEST_ENTRIES_MAX, 1000))
    assert reader.problems == [
        "manifest.jsonl grew by more than 16 checkpoint records at once: "
        "only the newest 16 of them are recorded"
    ]
    assert reader.new_entries() == []


def test_it_reports_the_isolation_it_would_use():
    strict = runner.isolation_status("strict")
    assert strict.complete and strict.can_run and strict.mode == "strict", strict.detail
    assert strict.detail.startswith("isolated")
    insecure = runner.isolation_status("insecure")
    assert insecure.can_run
    with pytest.raises(ValueError):
        runner.isolation_status("none")


def test_it_says_what_a_host_lacks_and_refuses_strict_then():
    lacking = runner.Isolation(
        requested="strict",
        missing=("bubblewrap is not installed",),
        bwrap=None,
        root=True,
        netns=True,
        cgroups=1,
        seccomp=True,
    )
    assert not lacking.can_run and lacking.mode == "insecure"
    assert lacking.detail == "INSECURE: bubblewrap is not installed"
    assert runner.Isolation(
        requested="insecure",
        missing=lacking.missing,
        bwrap=None,
        root=True,
        netns=True,
        cgroups=1,
        seccomp=True,
    ).can_run


def _wait_for_text(path: Path, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_it_runs_a_strict_pod_as_its_uid_with_no_capabilities_and_seccomp(root):
    command = (
        "id -u; id -G; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' "
        "/proc/self/status; "
        "umount -l /tmp; echo umount=$?; mount -o remount,rw /usr; echo remount=$?; "
        "unshare -r true; echo userns=$?; touch /usr/evil; echo write=$?; "
        "whoami; grep -c ' /etc/shadow ' /proc/self/mountinfo; "
        "ls /proc | grep -c '^[0-9]'"
    )
    code, log = run(spec(root, command, mode="strict"))
    assert code == 0, log
    assert f"\n{POD_UID}\n{POD_UID}\n" in log
    for line in (
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ):
        assert line in log, log
    for attempt in ("umount", "remount", "userns", "write"):
        assert f"{attempt}=0" not in log, log
    assert "\npod\n1\n" in log  # the uid has a name; /etc/shadow is covered by a mount
    assert int(log.strip().splitlines()[-2]) < 10  # only the pod's own processes


def test_it_refuses_to_make_a_pod_dir_through_a_planted_link(root):
    job = root / "job"
    (job / "data").mkdir(parents=True)
    outside = root / "outside"
    outside.mkdir()
    (job / "data" / "dataset").symlink_to(outside)
    with pytest.raises(OSError):
        runner.ensure_dir(job / "data" / "dataset" / "sub", under=job, uid=POD_UID)
    assert not (outside / "sub").exists()
    assert outside.stat().st_uid == 0  # not given to the pod
    runner.ensure_dir(job / "data" / "fresh" / "sub", under=job, uid=POD_UID)
    assert (job / "data" / "fresh" / "sub").stat().st_uid == POD_UID


def test_a_fifo_or_a_link_for_a_manifest_never_blocks_and_becomes_a_problem(root):
    fifo_dir, link_dir = root / "fifo", root / "link"
    fifo_dir.mkdir()
    link_dir.mkdir()
    os.mkfifo(fifo_dir / "manifest.jsonl")
    (link_dir / "manifest.jsonl").symlink_to("/etc/passwd")
    for directory in (fifo_dir, link_dir):
        started = time.monotonic()
        reader = runner.ManifestReader(directory)
        assert reader.new_entries() == []
        assert time.monotonic() - started < 10  # a blocked open would wait for ever
        assert reader.problems, directory


def test_it_skips_hostile_manifest_lines(root):
    directory = root / "ckpt"
    directory.mkdir()
    reader = runner.ManifestReader(directory)
    good = {"step": 4, "file": "ckpt-4.pt", "bytes": 10, "time": 1_700_000_000.0}
    lines = [
        "[" * 100_000,  # too long, and too deep
        json.dumps({**good, "file": "../../etc/passwd"}),
        json.dumps({**good, "file": "/etc/passwd"}),
        json.dumps({**good, "time": 1e300}),
        json.dumps({**good, "step": 10**30}),
        '{"step": "x"}',
        json.dumps({**good, "file": "\udc80"}),  # no UTF-8 encodes it: no row can hold it
        json.dumps({**good, "file": "x" * 500}),  # its path would not fit the row
        json.dumps(good),
    ]
    (directory / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    assert reader.new_entries() == [good]
    assert len(reader.problems) >= 6
    assert sum("cannot be recorded" in problem for problem in reader.problems) == 2


# --- the shim: the pod outlives whoever started it ---------------------------------------

STARTER = """
import sys
from pathlib import Path
from apps.agent import runner
spec = runner.PodSpec(name="pod-0", command=sys.argv[1], work_dir=Path(sys.argv[2]),
                      log_path=Path(sys.argv[3]), env={"PATH": "/usr/bin:/bin"})
process = runner.start(spec, Path(sys.argv[4]))
print(process.pid, flush=True)
"""


def _start_elsewhere(root: Path, command: str) -> tuple[Path, Path, int]:
    """Start a pod from a process that then exits (an agent killed right after), and
    return the shim's state directory, the pod's log and its pid."""
    import subprocess
    import sys

    work, log, state = root / "work", root / "logs" / "pod-0.log", root / "state" / "pod-0"
    work.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", STARTER, command, work, log, state],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return state, log, int(done.stdout.split()[0])


def test_a_pod_outlives_its_starter_and_is_adopted_with_its_real_exit(root):
    state, log, pid = _start_elsewhere(root, "echo one; sleep 1.5; echo two; exit 5")
    process = runner.PodProcess.adopt(state)
    assert process is not None and process.pid == pid
    assert process.result() is None and process.alive()  # running, its starter gone
    code = process.wait(timeout=15)
    ended = process.result()
    assert code == 5 and not ended.vanished
    assert ended.at <= time.time() and ended.at - process.started_at >= 1.4
    assert "one" in log.read_text() and "two" in log.read_text()
    process.discard()
    assert not state.exists()


def test_its_shim_says_a_pod_ended_no_later_than_the_end_it_reports(root):
    """What lets the agent's watch round vouch for no pod past its end while the shim
    collects its last output (`supervisor.watch_once`)."""
    process = runner.start(spec(root, "sleep 0.5; exit 4"), root / "state")
    assert process.result() is None and process.ending_since() is None  # it runs
    assert process.wait(timeout=30) == 4
    ending = process.ending_since()
    assert ending is not None and ending <= process.result().at
    process.discard()


def test_an_adopted_pod_is_stopped_with_its_grace_and_escalation(root):
    state, log, pid = _start_elsewhere(
        root, "trap 'echo got TERM' TERM; echo ready; while true; do sleep 0.1; done"
    )
    _wait_for_text(log, "ready")
    process = runner.PodProcess.adopt(state)
    started = time.monotonic()
    process.request_stop(1.0)
    assert process.wait(timeout=15) == 137  # the shim escalated to SIGKILL on its own
    assert 0.9 <= time.monotonic() - started < 5
    assert "got TERM" in log.read_text() and not runner.descendants(pid)


def test_a_stop_for_a_pod_whose_state_was_swept_meanwhile_is_nothing_to_do(root):
    # a stop request racing the pod's end: its state directory gone between the two
    state, log, pid = _start_elsewhere(root, "sleep 60")
    process = runner.PodProcess.adopt(state)
    moved = state.with_name("swept")
    state.rename(moved)
    try:
        process.request_stop(1.0)  # used to raise FileNotFoundError in the agent's log
        assert not state.exists()
    finally:
        moved.rename(state)  # where its shim looks: stop it for good
        process.request_stop(0)
        assert process.wait(timeout=15) in (137, 143)


def test_a_pod_whose_shim_is_killed_dies_with_it_and_is_reported_vanished(root):
    import signal

    state, log, pid = _start_elsewhere(root, "sleep 60")
    process = runner.PodProcess.adopt(state)
    os.kill(process.shim_pid, signal.SIGKILL)
    assert process.wait(timeout=15) == -1 and process.result().vanished
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (
        not os.path.exists(f"/proc/{pid}")
        or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    )


def test_nothing_is_adopted_where_no_pod_started(root):
    (root / "state").mkdir()
    assert runner.PodProcess.adopt(root / "state") is None


@pytest.mark.parametrize("mode", MODES)
def test_a_command_of_any_size_reaches_the_pod(root, mode):
    """The command is handed over as a script (a file in the sandbox, a descriptor
    outside it), never as an argument: a megabyte of it runs, past the kernel's 128 KiB
    limit on one argument."""
    command = "# " + "x" * (1 << 20) + '\necho "$((6 * 7)) from a big command"\n'
    pod_spec = spec(root, command, mode=mode)
    process = runner.start(pod_spec)
    assert process.wait(timeout=30) == 0
    process.finish()
    assert "42 from a big command" in pod_spec.log_path.read_text()


def test_it_tells_which_recorded_checkpoint_files_are_gone(root):
    directory = root / "ckpt"
    directory.mkdir()
    for step in (1, 2, 3):
        (directory / f"ckpt-{step}.pkl").write_bytes(b"x")
    reader = runner.ManifestReader(directory)
    reader.track([str(directory / f"ckpt-{step}.pkl") for step in (1, 2, 3)])
    reader.track(["/elsewhere/ckpt-9.pkl", str(directory / "..")])  # not of this directory
    assert reader.gone() == []
    (directory / "ckpt-1.pkl").unlink()
    (directory / "ckpt-2.pkl").unlink()
    (directory / "ckpt-2.pkl").symlink_to("/etc/passwd")  # a link is not the checkpoint
    assert sorted(reader.gone()) == [str(directory / "ckpt-1.pkl"), str(directory / "ckpt-2.pkl")]
    assert reader.gone() == []  # each once
    # the pod swaps the directory for a link to one holding a file of that name
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "ckpt-3.pkl").write_bytes(b"x")
    (directory / "ckpt-3.pkl").unlink()
    (directory / "ckpt-2.pkl").unlink()
    directory.rmdir()
    directory.symlink_to(elsewhere)
    assert reader.gone() == [str(directory / "ckpt-3.pkl")]


def test_it_finds_checkpoint_files_no_record_or_manifest_line_names(root):
    directory = root / "ckpt"
    directory.mkdir()
    (directory / "ckpt-000000000010.pkl").write_bytes(b"x" * 10)
    reader = runner.ManifestReader(directory)
    reader.track([str(directory / "ckpt-000000000010.pkl")])  # recorded before
    (directory / "ckpt-000000000020.pkl").write_bytes(b"y" * 20)  # renamed into place,
    (directory / ".ckpt-000000000030.pkl.tmp-1-2").write_bytes(b"z")  # not finished
    (directory / "ckpt-000000000040.pkl").mkdir()  # not a file
    (directory / "ckpt-000000000050.pkl").symlink_to("/etc/passwd")  # a link: not followed
    found = reader.unannounced()
    assert [(e["step"], e["file"], e["bytes"]) for e in found] == [
        (20, "ckpt-000000000020.pkl", 20)
    ]
    assert found[0]["time"] == (directory / "ckpt-000000000020.pkl").stat().st_mtime
    assert runner.ManifestReader(root / "none").unannounced() == []


def test_a_pods_log_calls_a_complete_sandbox_strict_as_the_health_page_does(tmp_path):
    isolation = runner.Isolation(
        requested="strict",
        missing=(),
        bwrap="/usr/bin/bwrap",
        root=True,
        netns=True,
        cgroups=2,
        seccomp=True,
    )
    pod = runner.PodSpec(
        name="pod-0",
        command="true",
        work_dir=tmp_path,
        log_path=tmp_path / "log",
        isolation=isolation,
        uid=POD_UID,
    )
    assert runner.describe(pod).startswith("sandbox: strict; uid")


def _fill(directory: Path) -> None:
    filler = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(filler, b"\0" * 4096):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(filler)


@contextlib.contextmanager
def small_disk(directory: Path):
    """`directory` on a disk of its own, a 64 KiB tmpfs (mounting needs root, as the
    sandboxed tests do); `_fill` fills it as something else on the host would."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


@pytest.fixture
def full_log_disk(root):
    """The pod's log directory on a small disk, filled to the last byte."""
    with small_disk(root / "pods" / "job-a" / "logs") as logs:
        _fill(logs)
        yield logs


@pytest.mark.parametrize("mode", MODES)
def test_a_pod_runs_on_while_its_logs_disk_is_full_and_the_log_says_what_was_lost(
    root, mode, full_log_disk
):
    """A full disk under the logs costs the pod's output, not the pod: before, the shim died
    of ENOSPC at its first note (the pod never started: StartError) or at the first output
    that did not fit (the pod was killed with it: AgentRestarted, its work lost)."""
    go = root / "pods" / "job-a" / "pod-0" / "go"
    command = (
        "for i in 1 2 3; do head -c 20000 /dev/zero | tr '\\0' x; echo; done; "
        f"while [ ! -e {go} ]; do sleep 0.1; done; echo after the disk had room again"
    )
    process = runner.start(spec(root, command, mode=mode), root / "state")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        if (root / "pods" / "job-a" / "pod-0").exists():  # the loop runs: it printed
            time.sleep(1)
            break
        time.sleep(0.1)
    (full_log_disk / "filler").unlink()  # room again
    go.touch()
    assert process.wait(timeout=30) == 0 and not process.result().vanished
    log = (full_log_disk / "pod-0.log").read_text()
    assert "after the disk had room again" in log
    assert "bytes of output were lost: the log's disk refused them (No space left" in log
    assert "exited with code 0" in log


def test_a_pods_exit_and_a_stop_are_not_lost_while_the_agents_state_disk_is_full(root):
    """The shim's state (its exit record, the agent's stop) on a disk that is full: before,
    the agent's stop raised ENOSPC (the pod ran on although stopped) and the shim died
    writing the exit (the pod was reported vanished, AgentRestarted, and run again)."""
    with small_disk(root / "state") as state:
        go = root / "pods" / "job-a" / "pod-0" / "go"
        ends = runner.start(
            spec(root, f"until [ -e {go} ]; do sleep 0.1; done; exit 7"), state / "a"
        )
        stopped = runner.start(spec(root, "sleep 60", name="pod-1"), state / "b")
        _fill(state)

        go.touch()  # the first ends on its own, the second is stopped
        stopped.request_stop(30)  # no stop file fits: the shim's SIGTERM, the same grace
        time.sleep(2)
        assert ends.result() is None and stopped.result() is None  # their exits wait
        (state / "filler").unlink()

        assert ends.wait(timeout=15) == 7 and not ends.result().vanished
        assert stopped.wait(timeout=15) == 143 and not stopped.result().vanished
