"""apps.agent.cgroups against the real kernel (no mocks), plus the v2 branch against a fake
tree.

The real-kernel tests need root and writable memory and pids controllers. They do not skip
when those are missing: a host that cannot limit pods is a failure the operator must see,
not a green run. Every group lives under a unique "paiweb-test-<uuid>" prefix that the
fixture removes whatever happens.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from apps.agent import cgroups
from apps.agent.cgroups import CgroupHost, Limits, PodCgroup

MIB = 1024 * 1024
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host() -> CgroupHost:
    found = cgroups.detect()
    assert found is not None, f"no usable cgroups on this host: {cgroups.detect_reason()}"
    return found


@pytest.fixture
def prefix(host: CgroupHost):
    name = f"paiweb-test-{uuid.uuid4().hex[:12]}"
    yield name
    cgroups.sweep(host, name, set())
    for base in host.directories():
        leftover = base / name
        if leftover.exists():
            os.rmdir(leftover)
    assert not any((base / name).exists() for base in host.directories())


@pytest.fixture
def procs():
    """Popen objects the test started; killed and reaped at the end whatever happens."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def start(group: PodCgroup, argv: list[str], procs: list, **kwargs) -> subprocess.Popen:
    process = subprocess.Popen(
        [*group.join_argv(), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        **kwargs,
    )
    procs.append(process)
    return process


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def knob(group: PodCgroup, controller: str, filename: str) -> str:
    return (group._dir(controller) / filename).read_text().strip()


# --- real kernel -----------------------------------------------------------------------


def test_detect_finds_memory_and_pids(host: CgroupHost):
    assert host.version in (1, 2)
    assert {"memory", "pids"} <= set(host.hierarchies)
    assert cgroups.detect_reason() == ""


def test_limits_are_written_before_anyone_joins(host: CgroupHost, prefix: str):
    group = host.create(f"{prefix}/pod", Limits(memory_bytes=64 * MIB, pids=20, cpu_millicores=200))
    assert group.pids() == []
    if host.version == 1:
        assert int(knob(group, "memory", "memory.limit_in_bytes")) == 64 * MIB
        if (group._dir("memory") / "memory.memsw.limit_in_bytes").exists():
            assert int(knob(group, "memory", "memory.memsw.limit_in_bytes")) == 64 * MIB
        if (group._dir("memory") / "memory.kmem.tcp.limit_in_bytes").exists():
            tcp = Limits(memory_bytes=64 * MIB).tcp_buffer_bytes(cgroups.host_tcp_pressure_bytes())
            assert int(knob(group, "memory", "memory.kmem.tcp.limit_in_bytes")) == tcp <= 64 * MIB
        assert knob(group, "pids", "pids.max") == "20"
        assert knob(group, "cpu", "cpu.cfs_period_us") == "100000"
        assert knob(group, "cpu", "cpu.cfs_quota_us") == "20000"
        assert knob(group, "cpu", "cpu.shares") == str(200 * 1024 // 1000)
        limit_file = group._dir("memory") / "memory.limit_in_bytes"
    else:
        assert knob(group, "memory", "memory.max") == str(64 * MIB)
        assert knob(group, "pids", "pids.max") == "20"
        assert knob(group, "cpu", "cpu.max") == "20000 100000"
        limit_file = group._dir("memory") / "memory.max"
    info = limit_file.stat()
    assert info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    directory = group._dir("memory").stat()
    assert directory.st_uid == 0 and not directory.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def test_create_is_idempotent_and_rewrites_limits(host: CgroupHost, prefix: str):
    host.create(f"{prefix}/pod", Limits(memory_bytes=64 * MIB, pids=20))
    again = host.create(f"{prefix}/pod", Limits(memory_bytes=32 * MIB, pids=10))
    name = "memory.limit_in_bytes" if host.version == 1 else "memory.max"
    assert int(knob(again, "memory", name)) == 32 * MIB
    assert knob(again, "pids", "pids.max") == "10"
    raised = host.create(f"{prefix}/pod", Limits(memory_bytes=128 * MIB))
    assert int(knob(raised, "memory", name)) == 128 * MIB
    assert knob(raised, "pids", "pids.max") == "max"


def test_memory_hog_is_oom_killed(host: CgroupHost, prefix: str, procs: list):
    group = host.create(f"{prefix}/hog", Limits(memory_bytes=64 * MIB, pids=50))
    hog = (
        "b = bytearray(200 * 1024 * 1024)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "print('survived')"
    )
    process = start(group, [sys.executable, "-c", hog], procs)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == -9, (process.returncode, out)
    assert "survived" not in out
    assert group.outcome() == "OOMKilled"
    assert group.usage()["memory_peak"] is None or group.usage()["memory_peak"] <= 64 * MIB


def test_fork_bomb_stops_at_pids_max(host: CgroupHost, prefix: str, procs: list):
    group = host.create(f"{prefix}/forks", Limits(memory_bytes=256 * MIB, pids=20))
    process = start(group, ["bash", "-c", "for i in $(seq 100); do sleep 5 & done; wait"], procs)
    highest = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        highest = max(highest, group.usage()["pids_current"] or 0)
        time.sleep(0.02)
    assert wait_for(lambda: group.outcome() == "TooManyProcesses")
    assert 0 < highest <= 20
    peak = group.usage()["pids_peak"]
    assert peak is None or peak <= 20
    group.kill_all()
    assert group.pids() == []
    process.wait(timeout=10)


def test_well_behaved_pod_has_no_outcome(host: CgroupHost, prefix: str, procs: list):
    group = host.create(
        f"{prefix}/good", Limits(memory_bytes=256 * MIB, pids=50, cpu_millicores=1000)
    )
    process = start(group, [sys.executable, "-c", "print('ok')"], procs)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out.strip()) == (0, "ok"), err
    assert group.outcome() == ""
    assert group.outcome(exit_code=0) == ""


def test_cpu_quota_throttles_a_busy_loop(host: CgroupHost, prefix: str, procs: list):
    assert host.has_cpu
    group = host.create(f"{prefix}/busy", Limits(cpu_millicores=200))
    loop = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.0: pass"
    process = start(group, [sys.executable, "-c", loop], procs)
    started = time.monotonic()
    _, status, rusage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    cpu = rusage.ru_utime + rusage.ru_stime
    assert process.returncode == 0
    assert wall >= 1.0
    assert 0.05 < cpu < 0.5, cpu  # unthrottled it would be ~1 s; 200m allows ~0.2 s
    cpu_usec = group.usage()["cpu_usec"]
    if cpu_usec is not None:  # the group's own accounting agrees
        assert cpu_usec < 500_000


def test_join_argv_enters_every_hierarchy(host: CgroupHost, prefix: str, procs: list):
    group = host.create(f"{prefix}/join", Limits(pids=50))
    assert len(group.procs_files) == len(host.directories())
    out = subprocess.run(
        [*group.join_argv(), "cat", "/proc/self/cgroup"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    membership = {}
    for line in out.splitlines():
        _, controllers, path = line.split(":", 2)
        membership[controllers] = path
    want = f"/{prefix}/join"
    if host.version == 2:
        assert membership[""] == want
    else:
        for base in host.directories():
            assert membership[base.name] == want, (base, out)
    sleeper = start(group, ["sleep", "30"], procs)
    assert wait_for(lambda: sleeper.pid in group.pids())
    # The launcher joins one hierarchy after another; all of them before it execs sleep.
    assert wait_for(
        lambda: all(str(sleeper.pid) in f.read_text().split() for f in group.procs_files)
    )


def test_join_fails_with_125_when_the_group_is_gone(host: CgroupHost, prefix: str):
    group = host.create(f"{prefix}/gone", Limits())
    group.remove()
    result = subprocess.run(
        [*group.join_argv(), "echo", "ran"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 125
    assert "ran" not in result.stdout
    assert "cgroup-join: cannot join" in result.stderr


def test_remove_kills_and_leaves_no_directory(host: CgroupHost, prefix: str, procs: list):
    group = host.create(f"{prefix}/a/pod", Limits(pids=20))
    sleeper = start(group, ["sleep", "300"], procs)
    assert wait_for(lambda: sleeper.pid in group.pids())
    group.remove()
    assert sleeper.wait(timeout=10) == -9
    for directory in (*group.dirs, *group.created):
        assert not directory.exists(), directory
    assert not any((base / prefix).exists() for base in host.directories())
    group.remove()  # already gone: no error


def test_remove_keeps_a_parent_another_pod_uses(host: CgroupHost, prefix: str):
    first = host.create(f"{prefix}/node/one", Limits())
    second = host.create(f"{prefix}/node/two", Limits())
    first.remove()
    assert all(d.exists() for d in second.dirs)
    second.remove()
    # "node" was first's to remove, and busy then; second only removes what it made.
    for base in host.directories():
        assert [p.name for p in (base / prefix / "node").iterdir() if p.is_dir()] == []


def test_sweep_removes_leftovers_only(host: CgroupHost, prefix: str, procs: list):
    kept = host.create(f"{prefix}/keep", Limits())
    left = host.create(f"{prefix}/left", Limits(pids=20))
    orphan = start(left, ["sleep", "300"], procs)
    assert wait_for(lambda: orphan.pid in left.pids())
    assert cgroups.sweep(host, prefix, {f"{prefix}/keep"}) == 1
    assert orphan.wait(timeout=10) == -9
    assert not any(d.exists() for d in left.dirs)
    assert all(d.exists() for d in kept.dirs)
    assert cgroups.sweep(host, prefix, {f"{prefix}/keep"}) == 0


def test_unprivileged_pod_cannot_touch_its_limits(host: CgroupHost, prefix: str, procs: list):
    group = host.create(
        f"{prefix}/jail", Limits(memory_bytes=64 * MIB, pids=20, cpu_millicores=500)
    )
    memory = group._dir("memory")
    if host.version == 1:
        targets = [
            memory / "memory.limit_in_bytes",
            group._dir("pids") / "pids.max",
            group._dir("cpu") / "cpu.cfs_quota_us",
        ]
        if (memory / "memory.memsw.limit_in_bytes").exists():
            targets.append(memory / "memory.memsw.limit_in_bytes")
    else:
        targets = [memory / "memory.max", memory / "pids.max", memory / "cpu.max"]
    roots = [base / "cgroup.procs" for base in host.directories()]
    script = (
        'for f; do if (echo $$ > "$f") 2>/dev/null; then echo "WROTE $f"; '
        'else echo "denied $f"; fi; done; '
        f'if mkdir "{memory}/escape" 2>/dev/null; then echo WROTE mkdir; '
        "else echo denied mkdir; fi; cat /proc/self/cgroup"
    )
    process = start(
        group, [*NOBODY, "/bin/sh", "-c", script, "sh", *map(str, [*targets, *roots])], procs
    )
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "WROTE" not in out, out
    assert out.count("denied") == len(targets) + len(roots) + 1
    assert f"/{prefix}/jail" in out  # still inside its group
    limit = "memory.limit_in_bytes" if host.version == 1 else "memory.max"
    assert int(knob(group, "memory", limit)) == 64 * MIB


# --- fake trees: the v2 branch and the parsing rules ------------------------------------


def fake_v2(root: Path, controllers: str = "cpuset cpu io memory hugetlb pids") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("1\n")
    return root


def read(path: Path) -> str:
    return path.read_text().strip()


def test_v2_fresh_group_limits_and_delegation(tmp_path: Path):
    root = fake_v2(tmp_path / "cg")
    host = cgroups.detect(root)
    assert host is not None and host.version == 2, cgroups.detect_reason(root)
    group = host.create(
        "paiweb/node1/pod-1", Limits(memory_bytes=64 * MIB, pids=20, cpu_millicores=250)
    )
    pod = root / "paiweb" / "node1" / "pod-1"
    assert group.procs_files == (pod / "cgroup.procs",)
    assert group.join_argv()[-2:] == [str(pod / "cgroup.procs"), "--"]
    assert read(pod / "memory.max") == str(64 * MIB)
    assert not (pod / "memory.swap.max").exists()  # no swap accounting: left alone
    assert read(pod / "pids.max") == "20"
    assert read(pod / "cpu.max") == "25000 100000"
    assert read(pod / "cpu.weight") == "25"
    for parent in (root, root / "paiweb", root / "paiweb" / "node1"):
        assert read(parent / "cgroup.subtree_control") == "+memory +pids +cpu"
    assert not (pod / "cgroup.subtree_control").exists()  # a leaf holds processes
    assert set(group.created) == {root / "paiweb", root / "paiweb" / "node1", pod}


def test_v2_unlimited_and_without_cpu(tmp_path: Path):
    root = fake_v2(tmp_path / "cg", controllers="memory pids")
    host = cgroups.detect(root)
    assert host is not None and not host.has_cpu
    host.create("p/x", Limits())
    assert read(root / "cgroup.subtree_control") == "+memory +pids"
    assert read(root / "p" / "x" / "memory.max") == "max"
    assert read(root / "p" / "x" / "pids.max") == "max"
    assert not (root / "p" / "x" / "cpu.max").exists()


def test_v2_reused_leftover_outcome_and_usage(tmp_path: Path):
    root = fake_v2(tmp_path / "cg")
    (root / "cgroup.subtree_control").write_text("cpu memory pids\n")
    pod = root / "paiweb" / "pod-2"
    pod.mkdir(parents=True)
    (root / "paiweb" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    events = "low 0\nhigh 0\nmax 9\noom 4\noom_kill {}\noom_group_kill 0\n"
    (pod / "memory.events").write_text(events.format(2))  # an old pod's OOM kills
    (pod / "pids.events").write_text("max 1\n")
    (pod / "memory.swap.max").write_text("max\n")
    host = cgroups.detect(root)
    assert host is not None
    group = host.create("paiweb/pod-2", Limits(memory_bytes=32 * MIB, cpu_millicores=50_000_000))
    assert read(root / "cgroup.subtree_control") == "cpu memory pids"  # untouched
    assert read(pod / "memory.swap.max") == "0"
    assert read(pod / "cpu.weight") == "10000"
    assert group.created == ()
    assert group.outcome() == ""  # the counts it found are the baseline
    (pod / "pids.events").write_text("max 4\n")
    assert group.outcome() == "TooManyProcesses"
    (pod / "memory.events").write_text(events.format(3))
    assert group.outcome() == "OOMKilled"  # a memory kill wins
    (pod / "memory.current").write_text("1234\n")
    (pod / "memory.peak").write_text("5678\n")
    (pod / "pids.current").write_text("3\n")
    (pod / "cpu.stat").write_text("usage_usec 42\nuser_usec 40\nsystem_usec 2\n")
    (pod / "cgroup.procs").write_text("12\n34\n")
    assert group.usage() == {
        "memory_current": 1234,
        "memory_peak": 5678,
        "pids_current": 3,
        "pids_peak": None,
        "cpu_usec": 42,
    }
    assert group.pids() == [12, 34]


def test_v2_detect_reasons(tmp_path: Path):
    assert cgroups.detect(tmp_path / "missing") is None
    assert "does not exist" in cgroups.detect_reason(tmp_path / "missing")
    no_pids = fake_v2(tmp_path / "a", controllers="cpu memory")
    assert cgroups.detect(no_pids) is None
    assert "pids" in cgroups.detect_reason(no_pids)
    nested = fake_v2(tmp_path / "b")
    (nested / "cgroup.type").write_text("domain\n")  # not the real root, and populated
    assert cgroups.detect(nested) is None
    assert "holds processes" in cgroups.detect_reason(nested)
    (nested / "cgroup.subtree_control").write_text("memory pids\n")
    assert cgroups.detect(nested) is not None
    assert cgroups.detect_reason(nested) == ""
    assert "no cgroup v1 hierarchy" in cgroups.detect_reason(tmp_path)


def test_v1_comounted_cpu_and_the_oom_fallback_rule(tmp_path: Path):
    root = tmp_path / "cg"
    for hierarchy in ("memory", "pids", "cpu,cpuacct"):
        (root / hierarchy).mkdir(parents=True)
        (root / hierarchy / "cgroup.procs").write_text("")
    (root / "cpu").symlink_to("cpu,cpuacct")
    (root / "cpuacct").symlink_to("cpu,cpuacct")
    pod = root / "memory" / "paiweb" / "pod"
    pod.mkdir(parents=True)
    (pod / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    (pod / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")  # < 4.13
    (pod / "memory.failcnt").write_text("7\n")
    host = cgroups.detect(root)
    assert host is not None and host.version == 1
    assert [d.name for d in host.directories()] == ["memory", "pids", "cpu,cpuacct"]
    group = host.create("paiweb/pod", Limits(memory_bytes=64 * MIB, pids=20, cpu_millicores=1))
    assert len(group.procs_files) == 3  # cpuacct shares cpu's hierarchy: joined once
    assert read(pod / "memory.limit_in_bytes") == str(64 * MIB)
    assert read(pod / "memory.memsw.limit_in_bytes") == str(64 * MIB)
    assert read(pod / "memory.failcnt") == "0"  # reset for the new pod
    cpu = root / "cpu,cpuacct" / "paiweb" / "pod"
    assert read(cpu / "cpu.cfs_quota_us") == "1000"  # the kernel's 1 ms minimum
    assert read(cpu / "cpu.shares") == "2"
    assert read(root / "pids" / "paiweb" / "pod" / "pids.max") == "20"
    (pod / "memory.failcnt").write_text("3\n")  # the limit was hit...
    assert group.outcome() == ""  # ...which alone is only reclaim
    assert group.outcome(exit_code=0) == ""
    assert group.outcome(exit_code=137) == "OOMKilled"  # ...and the pod died of SIGKILL
    assert group.outcome(exit_code=-9) == "OOMKilled"


def test_limits_arithmetic_and_validation(tmp_path: Path):
    assert Limits(cpu_millicores=1500).cfs_quota_us() == 150_000
    assert Limits().cfs_quota_us() == -1
    assert (Limits().cpu_shares(), Limits().cpu_weight()) == (1024, 100)
    assert (Limits(cpu_millicores=1000).cpu_shares(), Limits(cpu_millicores=1000).cpu_weight()) == (
        1024,
        100,
    )
    assert Limits(cpu_millicores=5).cpu_weight() == 1
    # TCP buffers (v1): the pod's memory, at most a quarter of the host's pressure threshold
    assert Limits(memory_bytes=256 * MIB).tcp_buffer_bytes(4096 * MIB) == 256 * MIB
    assert Limits(memory_bytes=16384 * MIB).tcp_buffer_bytes(4096 * MIB) == 1024 * MIB
    assert Limits().tcp_buffer_bytes(4096 * MIB) == 1024 * MIB
    assert Limits(memory_bytes=256 * MIB).tcp_buffer_bytes(None) == 256 * MIB
    assert Limits().tcp_buffer_bytes(None) == 0
    tcp_mem = tmp_path / "tcp_mem"
    tcp_mem.write_text("287916\t383888\t575832\n")
    assert cgroups.host_tcp_pressure_bytes(tcp_mem) == 383888 * os.sysconf("SC_PAGE_SIZE")
    tcp_mem.write_text("garbage\n")
    assert cgroups.host_tcp_pressure_bytes(tcp_mem) is None
    assert cgroups.host_tcp_pressure_bytes(tmp_path / "absent") is None
    with pytest.raises(ValueError):
        Limits(memory_bytes=-1)
    fake = CgroupHost(version=1, root=tmp_path, hierarchies={"memory": tmp_path})
    for bad in ("../etc", "/", "a//b", ".hidden", "a/cgroup procs"):
        with pytest.raises(ValueError):
            fake.create(bad, Limits())
