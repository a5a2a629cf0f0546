"""A job's command is a stranger's code: every attack here runs as a real pod under a real
node agent (as root, as CI runs), fails, and leaves the platform working.

The agent of this module runs with small limits (a 64 MiB disk quota, 3,000 files, 64
processes, 16 MiB /tmp and /dev/shm) so that each limit is reached in a second or two.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from apps.agent.housekeeping import job_dirs_sweep
from apps.agent.models import PodProcess
from apps.jobs.models import Checkpoint, Job, JobEvent, JobStatus, PodStatus
from apps.jobs.services import job_stop
from tests.integration.test_agent_pods import (  # noqa: F401 (fixtures)
    agent_backend,
    job_in,
    pod_log,
    running_agent,
    submit,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

LIMITS = {
    "POD_DISK_QUOTA_MIB": "64",
    "POD_MAX_FILES": "3000",
    "POD_PIDS_MAX": "64",
    "POD_TMP_MIB": "16",
    "POD_SHM_MIB": "16",
    "POD_DISK_CHECK_SECONDS": "0.5",
}


@pytest.fixture(scope="module")
def agent(django_db_setup, django_db_blocker):
    """This module's agent: the pod tests' agent, with small limits."""
    with running_agent(django_db_blocker, **LIMITS) as process:
        yield process


@pytest.fixture
def limits(settings):
    for name, value in LIMITS.items():
        setattr(settings, name, float(value) if "." in value else int(value))


def python(script: str) -> str:
    """A pod command running `script` with the pod's python."""
    return f"python - <<'PAIWEB_EOF'\n{textwrap.dedent(script)}\nPAIWEB_EOF"


# Two pods of a job: rank 0 listens on MASTER_PORT for 8 s and lists who said hello; the
# others connect to MASTER_ADDR:MASTER_PORT and say "worker-1".
PAIR = """
import os, socket, time
port, rank = int(os.environ["MASTER_PORT"]), int(os.environ["RANK"])
if rank == 0:
    server = socket.create_server(("0.0.0.0", port)); server.settimeout(1)
    deadline, peers = time.time() + 8, []
    while time.time() < deadline:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            continue
        peers.append(conn.recv(100).decode())
    print("PEERS", sorted(peers))
else:
    for _ in range(100):
        try:
            s = socket.create_connection((os.environ["MASTER_ADDR"], port), timeout=1)
            s.sendall(b"worker-1"); print("sent"); break
        except OSError:
            time.sleep(0.1)
"""


def events(job, kind: str) -> list[str]:
    return list(JobEvent.objects.filter(job=job, kind=kind).values_list("message", flat=True))


def host_addresses() -> list[str]:
    """This host's own non-loopback IPv4 addresses (a pod must not reach them either)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]


@pytest.fixture
def listener():
    """A TCP server on the host's loopback and an abstract unix socket, both answering
    "platform": what a pod must never reach (as it must not reach PostgreSQL or Redis)."""
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", 0))
    tcp.listen(16)
    abstract = socket.socket(socket.AF_UNIX)
    name = f"paiweb-test-{uuid.uuid4().hex}"
    abstract.bind("\0" + name)
    abstract.listen(16)
    reached = []

    def serve(server):
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            reached.append(server)
            try:
                conn.sendall(b"platform")
            except OSError:
                pass
            conn.close()

    for server in (tcp, abstract):
        threading.Thread(target=serve, args=(server,), daemon=True).start()
    yield {"port": tcp.getsockname()[1], "abstract": name, "reached": reached}
    tcp.close()
    abstract.close()


def test_a_pod_runs_as_its_jobs_uid_with_no_privilege_and_cannot_remount(personas, agent_backend):
    venv_site = Path(sys.prefix) / "lib"
    planted = Path(django_settings.BASE_DIR) / "paiweb-planted"
    command = (
        "id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "
        "/proc/self/status; "
        "umount -l /tmp; echo umount-tmp=$?; umount -l /proc; echo umount-proc=$?; "
        "mount -o remount,bind,rw /; echo remount-root=$?; "
        "mount -o remount,rw /usr; echo remount-usr=$?; "
        "mount -t tmpfs none /mnt; echo mount=$?; "
        "unshare -r true; echo userns=$?; unshare -m true; echo mountns=$?; "
        "nsenter -t 1 -m true; echo nsenter=$?; "
        f"touch {venv_site}/evil.pth; echo pth=$?; touch {planted}; echo repo=$?; "
        "touch /usr/evil; echo usr=$?; chmod u+s /usr/bin/bash; echo suid=$?; "
        "su -c id root </dev/null; echo su=$?; "
        "true"
    )
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    uid = django_settings.POD_UID_BASE + job.pk
    assert f"\n{uid}\n{uid}\n{uid}\n" in log, log  # uid, gid and the only group
    for line in (
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ):
        assert line in log, log
    for attempt in (
        "umount-tmp",
        "umount-proc",
        "remount-root",
        "remount-usr",
        "mount",
        "userns",
        "mountns",
        "nsenter",
        "pth",
        "repo",
        "usr",
        "suid",
        "su",
    ):
        assert f"\n{attempt}=" in log and f"\n{attempt}=0\n" not in log, (attempt, log)
    assert not list(venv_site.glob("evil.pth")) and not planted.exists()
    assert not Path("/usr/evil").exists()
    assert os.stat("/usr/bin/bash").st_mode & 0o4000 == 0


def test_a_pod_sees_no_secret_of_the_platform_nor_another_job(personas, agent_backend):
    victim = submit(
        personas, command="echo bobs-secret > secret.txt; sleep 60", user="bob", name="victim"
    )
    job_in(victim, JobStatus.RUNNING, agent=agent_backend)
    victim_dir = Path(PodProcess.objects.get(pod=victim.pods.get()).work_dir)
    wait_for(
        lambda: (victim_dir / "secret.txt").exists(), what="the victim's file", agent=agent_backend
    )
    db_name = str(connection.settings_dict["NAME"])
    paths = [
        victim_dir / "secret.txt",
        victim_dir,
        Path(db_name),
        Path(django_settings.BASE_DIR) / "paiweb" / "settings.py",
        Path(django_settings.VAR_DIR),
        agent_backend.var_dir,
        agent_backend.pod_work_root,
        Path("/etc/shadow"),
        Path("/root"),
        Path("/var/run/postgresql"),
        Path("/run"),
    ]
    command = "; ".join(
        f"cat {p} 2>/dev/null | head -c 100; ls {p} 2>/dev/null | head -5" for p in paths
    )
    command += (
        "; echo PROCS=$(ls /proc | grep -c '^[0-9]'); "
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -E "
        "'DATABASE_URL|REDIS_URL|SECRET_KEY|DJANGO' || echo no-platform-env; "
        "kill -9 -1; echo killed-all=$?; "
        "echo SHADOW-COVERED=$(grep -c ' /etc/shadow ' /proc/self/mountinfo); true"
    )
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "bobs-secret" not in log and "secret.txt" not in log
    assert "SQLite format" not in log and "SECRET_KEY" not in log
    assert "DATABASE_URL" not in log and "no-platform-env" in log
    assert "root:" not in log and "SHADOW-COVERED=1" in log  # /etc/shadow is covered
    assert int(log.split("PROCS=")[1].split()[0]) < 10, log  # its own processes only
    victim.refresh_from_db()
    assert victim.status == JobStatus.RUNNING  # kill -9 -1 reached nothing outside the pod
    job_stop(job=victim, by=personas["bob"])


def test_a_jobs_environment_reaches_its_command_and_no_process_that_runs_as_root(
    personas, agent_backend, tmp_path
):
    """The chain that builds the sandbox runs as root, in the host's mount tree: had it the
    job's variables, its dynamic loader would write LD_DEBUG_OUTPUT to a host path (as it
    would load LD_PRELOAD, a library an earlier pod of the job wrote, as root)."""
    trace = tmp_path / "loader"
    envs = {
        "LD_DEBUG": "libs",
        "LD_DEBUG_OUTPUT": str(trace),
        "LD_PRELOAD": "/nonexistent/evil.so",
        "ODD": "a b=c\n  'd' $HOME",
    }
    command = (
        'printf "[%s]\\n" "$ODD" "$LD_DEBUG_OUTPUT" "$LD_PRELOAD"; '
        'yes | head -c 2 >/dev/null; echo "sigpipe=${PIPESTATUS[0]}"'
    )
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b", envs=envs)
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "[a b=c\n  'd' $HOME]\n" in log, log
    assert f"[{trace}]\n[/nonexistent/evil.so]\n" in log, log
    assert "sigpipe=141\n" in log, log  # signals as a shell's: SIGPIPE is not ignored
    assert not list(tmp_path.glob("loader*")), "a process of the chain obeyed LD_DEBUG_OUTPUT"


def test_a_pod_sees_its_own_cgroup_and_not_another_jobs(personas, agent_backend):
    """/sys is the host's (read-only): its cgroup tree named every other job's pods, with
    their memory, CPU and process counts. The pod sees its own group at the root of each
    hierarchy, its limits where a container's are."""
    victim = submit(personas, command="sleep 60", user="bob", name="victim")
    job_in(victim, JobStatus.RUNNING, agent=agent_backend)
    command = (
        "echo SEEN=$(find /sys/fs/cgroup -name 'dlc*' | wc -l) "
        "$(grep -rls . /sys/fs/cgroup 2>/dev/null | grep -c paiweb); "
        "echo LIMIT=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes "
        "/sys/fs/cgroup/memory.max 2>/dev/null)"
    )
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b", memory=256)
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "SEEN=0 0\n" in log, log
    assert f"LIMIT={256 * 1024 * 1024}\n" in log, log
    job_stop(job=victim, by=personas["bob"])


def test_a_pod_reads_no_services_environment_file(personas, agent_backend):
    """/etc/default/<service> and systemd's units are where a host keeps a service's
    variables (EnvironmentFile=, Environment=SECRET_KEY=…), readable by all: covered."""
    command = "for d in /etc/default /etc/sysconfig /etc/systemd; do echo $d=$(ls -A $d); done"
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    for directory in ("/etc/default", "/etc/sysconfig", "/etc/systemd"):
        assert f"\n{directory}=\n" in log, log


def test_a_pod_reaches_no_service_of_the_platform_and_the_platform_keeps_working(
    personas, agent_backend, listener
):
    victim = submit(personas, command="echo up; sleep 60", user="bob", name="victim")
    job_in(victim, JobStatus.RUNNING, agent=agent_backend)
    targets = [("127.0.0.1", port) for port in (5432, 6379, 5672, 8000, 5555, listener["port"])]
    targets += [
        (address, port) for address in host_addresses() for port in (5432, 6379, listener["port"])
    ]
    unix = [
        "/var/run/postgresql/.s.PGSQL.5432",
        "/run/postgresql/.s.PGSQL.5432",
        django_settings.REDIS_URL.removeprefix("unix://"),
        "\0" + listener["abstract"],
    ]
    script = f"""
        import socket
        for host, port in {targets!r}:
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect((host, port)); print("REACHED", host, port)
            except OSError as exc:
                print("blocked", host, port, type(exc).__name__)
        for path in {unix!r}:
            s = socket.socket(socket.AF_UNIX); s.settimeout(2)
            try:
                s.connect(path); print("REACHED", repr(path))
            except OSError as exc:
                print("blocked", repr(path), type(exc).__name__)
        print("routes:", open("/proc/net/route").read().count("\\n") - 1)
    """
    job = submit(personas, command=python(script), user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "REACHED" not in log, log
    assert log.count("blocked") == len(targets) + len(unix), log
    assert "routes: 0" in log  # loopback only: no way out of the namespace
    assert listener["reached"] == []
    victim.refresh_from_db()
    assert victim.status == JobStatus.RUNNING
    after = submit(personas, command="echo still-working", name="after")
    job_in(after, JobStatus.SUCCEEDED, agent=agent_backend)
    job_stop(job=victim, by=personas["bob"])


def test_a_pod_reaches_no_service_of_the_host_over_ipv6(personas, agent_backend):
    """A service on the host's IPv6 loopback (or on every address, "::"): the pod's ::1 is
    its namespace's own."""
    servers = []
    for address in ("::1", "::"):
        server = socket.socket(socket.AF_INET6)
        server.bind((address, 0))
        server.listen()
        servers.append(server)
    ports = [server.getsockname()[1] for server in servers]
    script = f"""
        import socket
        for port in {ports!r}:
            try:
                socket.create_connection(("::1", port), timeout=2); print("REACHED", port)
            except OSError as exc:
                print("blocked", port, type(exc).__name__)
    """
    try:
        job = submit(personas, command=python(script), user="charlie", ws="ws_b", quota="team-b")
        job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    finally:
        for server in servers:
            server.close()
    log = pod_log(job.pods.get())
    assert "REACHED" not in log and log.count("blocked") == 2, log


def test_a_pod_has_no_virtual_machine_socket_past_its_network_namespace(personas, agent_backend):
    """AF_VSOCK belongs to no network namespace: on a virtual machine it reaches the
    hypervisor's services, whatever the job's namespace holds. The socket is never made
    (nothing is connected to: the other side is the host's)."""
    script = """
        import socket
        for family in (socket.AF_VSOCK, socket.AF_INET, socket.AF_UNIX):
            try:
                socket.socket(family, socket.SOCK_STREAM).close(); print(family.name, "made")
            except OSError as exc:
                print(family.name, "refused", exc.strerror)
    """
    job = submit(personas, command=python(script), user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "AF_VSOCK refused Operation not permitted" in log, log
    assert "AF_INET made" in log and "AF_UNIX made" in log, log


def test_the_pods_of_one_job_talk_and_another_jobs_pod_cannot_reach_them(personas, agent_backend):
    script = PAIR
    pair = submit(personas, command=python(script), pods=2, name="pair")
    port = wait_for(
        lambda: (
            PodProcess.objects.filter(pod__job=pair).values_list("master_port", flat=True).first()
        ),
        what="the pair's port",
        agent=agent_backend,
    )
    probe = f"""
        import socket, time
        found = []
        for _ in range(20):
            for host in ("127.0.0.1", "0.0.0.0"):
                try:
                    s = socket.create_connection((host, {port}), timeout=0.5)
                    s.sendall(b"INTRUDER"); found.append(host)
                except OSError:
                    pass
            time.sleep(0.2)
        print("INTRUDED" if found else "unreachable")
    """
    other = submit(
        personas, command=python(probe), user="charlie", ws="ws_b", quota="team-b", name="other"
    )
    job_in(pair, JobStatus.SUCCEEDED, agent=agent_backend)
    job_in(other, JobStatus.SUCCEEDED, agent=agent_backend)
    master = min(pair.pods.all(), key=lambda p: p.index)
    assert "PEERS ['worker-1']" in pod_log(master), pod_log(master)
    assert "unreachable" in pod_log(other.pods.get())


def test_a_pod_over_its_memory_ends_oomkilled(personas, agent_backend):
    script = """
        chunks = []
        while True:
            chunks.append(b"x" * (16 << 20))
    """
    job = submit(personas, command=python(script), memory=256, name="hog")
    job_in(job, JobStatus.FAILED, agent=agent_backend)
    pod = job.pods.get()
    assert (pod.status, pod.reason) == (PodStatus.FAILED, "OOMKilled"), pod.message
    assert "memory limit of 256 MiB" in pod.message
    assert "OOMKilled" in job.reason_message
    assert any("OOMKilled" in m or "memory limit" in m for m in events(job, "OOMKilled"))


def test_a_pods_tcp_buffers_count_against_its_memory_not_the_hosts_sockets(personas, agent_backend):
    """Data sent on TCP connections nobody reads is held in kernel buffers, which cgroup v1
    charged to no limit of the pod: they count against the host's TCP memory (tcp_mem), the
    budget of every socket of the host, PostgreSQL's and Redis's included. A pod of 256 MiB
    pinned 640 MiB there. Its sockets' buffers are capped at its memory."""
    script = """
        import socket
        server = socket.create_server(("127.0.0.1", 0), backlog=1024)
        held, pinned, idle = [], 0, 0
        while pinned < (640 << 20) and len(held) < 2000 and idle < 50:
            client = socket.create_connection(server.getsockname())
            peer, _ = server.accept()
            client.setblocking(False)
            sent = 0
            try:
                while True:
                    sent += client.send(bytes(1 << 16))
            except BlockingIOError:
                pass
            pinned += sent
            idle = idle + 1 if sent < (1 << 16) else 0
            held.append((client, peer))
        print("PINNED", pinned >> 20)
    """
    job = submit(personas, command=python(script), memory=256, name="tcp-buffers")
    job_in(job, JobStatus.SUCCEEDED, JobStatus.FAILED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "PINNED" in log, log
    assert int(log.split("PINNED ")[1].split()[0]) <= 256 + 32, log


def test_a_fork_bomb_stops_at_the_process_limit(personas, agent_backend):
    script = """
        import os, sys, time
        children = []
        try:
            for _ in range(1000):
                pid = os.fork()
                if pid == 0:
                    time.sleep(30); os._exit(0)
                children.append(pid)
        except OSError as exc:
            print("forked", len(children), "then", exc.strerror)
        for pid in children:
            os.kill(pid, 9)
        sys.exit(1)
    """
    job = submit(personas, command=python(script), name="forks")
    job_in(job, JobStatus.FAILED, agent=agent_backend)
    pod = job.pods.get()
    log = pod_log(pod)
    forked = int(log.split("forked ")[1].split()[0])
    assert forked < 64, log
    assert pod.reason == "TooManyProcesses", (pod.reason, pod.message, log)
    assert "limit of 64 processes" in pod.message


@pytest.mark.parametrize(
    "command, why",
    [
        ("head -c 100M /dev/zero > big; exit $?", "disk quota of 64 MiB"),
        ("for i in $(seq 20); do head -c 10M /dev/zero > f$i; done; sleep 30", "quota of 64 MiB"),
        ("mkdir d && cd d && for i in $(seq 5000); do : > $i; done; sleep 30", "3,000 files"),
        (  # each file removed but held open: its space stays taken, and no walk lists it
            'for i in 3 4 5 6 7; do eval "exec $i>f$i"; head -c 20M /dev/zero >&$i; rm f$i; '
            "done; sleep 30",
            "quota of 64 MiB",
        ),
        (  # removed, its descriptor closed, but still mapped: the same
            python("""
                import mmap, os, time
                maps = []
                for i in range(5):
                    with open(f"f{i}", "wb+") as f:
                        f.write(bytes(20 << 20))
                        maps.append(mmap.mmap(f.fileno(), 0))
                    os.remove(f"f{i}")
                time.sleep(30)
            """),
            "quota of 64 MiB",
        ),
        (  # the same behind more descriptors than the agent looks at
            python("""
                import os, resource, time
                _, most = resource.getrlimit(resource.RLIMIT_NOFILE)
                resource.setrlimit(resource.RLIMIT_NOFILE, (most, most))
                quiet = [os.open("/dev/null", os.O_RDONLY) for _ in range(3100)]
                held = []
                for i in range(5):
                    held.append(open(f"f{i}", "wb"))
                    held[-1].write(bytes(20 << 20))
                    held[-1].flush()
                    os.remove(f"f{i}")
                time.sleep(30)
            """),
            "3,000 files",
        ),
    ],
    ids=[
        "one-big-file",
        "many-files-of-size",
        "too-many-files",
        "removed-files-held-open",
        "removed-files-mapped",
        "removed-files-behind-many-descriptors",
    ],
)
def test_a_pod_over_its_disk_quota_is_stopped(personas, agent_backend, limits, command, why):
    job = submit(personas, command=command, name="filler")
    job_in(job, JobStatus.FAILED, agent=agent_backend)
    pod = job.pods.get()
    assert pod.reason == "DiskQuotaExceeded", (pod.reason, pod.message, pod_log(pod))
    assert why in pod.message
    assert "DiskQuotaExceeded" in job.reason_message


def test_a_pods_daemons_do_not_outlive_it(personas, agent_backend):
    """setsid, nohup and a double fork leave the pod's session and process group: they
    still end with it (its pid namespace), and nothing of its uid runs on the host after."""
    command = (
        "setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & disown; "
        "python -c 'import os, time\nif os.fork() == 0:\n os.setsid()\n "
        "if os.fork() == 0:\n  time.sleep(302)'; echo daemonized"
    )
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    assert "daemonized" in pod_log(job.pods.get())
    uid = django_settings.POD_UID_BASE + job.pk

    def left() -> list[str]:
        out = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True)
        return [line for line in out.stdout.splitlines() if line.split()[0] == str(uid)]

    wait_for(lambda: not left(), what="the pod's processes to end", agent=agent_backend, timeout=5)


@pytest.mark.parametrize(
    "command",
    [
        "date -s '2020-01-01 00:00:00'",
        "hostname host-of-the-platform",
        "mknod disk b 8 0",
        "python -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'",
        "python -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'",
        "unshare -T true",
        "chroot /tmp /bin/true",
        "chrt -f 1 true",
        "echo 1 > /sys/fs/cgroup/pids/cgroup.procs || echo 1 > /sys/fs/cgroup/cgroup.procs",
        "echo '|/tmp/x' > /proc/sys/kernel/core_pattern",
        "cat /dev/kmsg",
        "cat /proc/1/environ",
        "ls /proc/1/root/",
    ],
    ids=[
        "clock",
        "hostname",
        "device-node",
        "raw-socket",
        "packet-socket",
        "time-namespace",
        "chroot",
        "realtime-priority",
        "cgroup-procs",
        "core-pattern",
        "kernel-log",
        "sandbox-init-environ",
        "sandbox-init-root",
    ],
)
def test_a_pod_cannot(personas, agent_backend, command):
    job = submit(
        personas, command=f"{command}; echo exit=$?", user="charlie", ws="ws_b", quota="team-b"
    )
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "\nexit=" in log and "\nexit=0\n" not in log, log
    assert "command not found" not in log, log  # refused, not missing


def host_interfaces() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()} - {"lo"}


def test_a_pod_sees_neither_the_sandboxs_host_paths_nor_the_hosts_interfaces(
    personas, agent_backend
):
    """The sandbox's pid 1 is bwrap's, and its command line (/proc/1/cmdline) held every
    option: the work root, the agent's cgroup and name, the binds; /sys/class/net listed
    the host's interfaces and every job's links by name. bwrap reads its options from a
    descriptor, and the pod's /sys shows no interface of the host."""
    command = (
        "echo INIT; tr '\\0' ' ' < /proc/1/cmdline; echo; echo NET; ls /sys/class/net "
        "/sys/devices/virtual/net; echo END; ip -o link show | wc -l"
    )
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    init = log.split("INIT\n")[1].split("\nNET")[0]
    assert init.split()[1:4] == ["--args", init.split()[2], "--"], init
    for host_path in (agent_backend.var_dir, "/sys/fs/cgroup", "--bind", "--hostname"):
        assert str(host_path) not in init, init
    listed = set(log.split("NET\n")[1].split("END\n")[0].split())
    assert not listed & host_interfaces(), log
    assert listed <= {"/sys/class/net:", "/sys/devices/virtual/net:"}, log


def test_a_pod_inherits_no_descriptor_but_its_standard_streams(personas, agent_backend):
    command = "echo FDS; ls /proc/$$/fd; echo END"
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    fds = set(log.split("FDS\n")[1].split("END\n")[0].split())
    assert fds == {"0", "1", "2", "255"}, log  # 255: bash's own copy of its script


def test_tmp_and_shm_are_small_private_and_size_capped(personas, agent_backend):
    command = (
        "head -c 40M /dev/zero > /tmp/x; echo tmp=$?; "
        "head -c 40M /dev/zero > /dev/shm/x; echo shm=$?; "
        "echo TMP=$(df -m --output=size /tmp | tail -1 | tr -d ' '); "
        "echo SHM=$(df -m --output=size /dev/shm | tail -1 | tr -d ' '); true"
    )
    job = submit(personas, command=command, name="tmp")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "tmp=0" not in log and "shm=0" not in log and "No space left" in log, log
    assert "TMP=16" in log and "SHM=16" in log


def test_a_fifo_manifest_neither_hangs_the_agent_nor_leaves_the_job_running(
    personas, agent_backend
):
    command = 'mkfifo "$PAIWEB_CHECKPOINT_DIR/manifest.jsonl" && sleep 2 && echo done'
    job = submit(personas, command=command, name="fifo")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    process = PodProcess.objects.get(pod=job.pods.get())
    assert process.state == PodProcess.State.EXITED and process.exit_code == 0
    assert any("not a regular file" in m for m in events(job, "CheckpointManifestInvalid"))
    after = submit(personas, command="echo still-working", name="after")
    job_in(after, JobStatus.SUCCEEDED, agent=agent_backend)


def test_a_flood_of_checkpoint_records_neither_fills_the_database_nor_holds_up_other_jobs(
    personas, agent_backend
):
    """Each manifest line is a Checkpoint row: 200,000 lines written at once were as many
    inserts, and the agent's watch loop, busy with them, started no other job's pod."""
    script = """
        import json, os, time
        while not os.path.exists("go"):  # the agent reads the lines written after its start
            time.sleep(0.05)
        path = os.path.join(os.environ["PAIWEB_CHECKPOINT_DIR"], "manifest.jsonl")
        line = '{{"step": {}, "file": "ckpt-{}.pkl", "bytes": 1, "time": %f}}\\n' % time.time()
        with open(path, "a") as manifest:
            manifest.write("".join(line.format(i, i) for i in range(200_000)))
        print("flooded", flush=True)
        time.sleep(60)
    """
    flood = submit(personas, command=python(script), user="charlie", ws="ws_b", quota="team-b")
    job_in(flood, JobStatus.RUNNING, agent=agent_backend)  # its agent reads the manifest
    (Path(PodProcess.objects.get(pod=flood.pods.get()).work_dir) / "go").touch()
    wait_for(lambda: "flooded" in pod_log(flood.pods.get()), what="the flood", agent=agent_backend)
    started = time.monotonic()
    other = submit(personas, command="echo still-working", name="other")
    job_in(other, JobStatus.SUCCEEDED, agent=agent_backend, timeout=15)
    wait_for(
        lambda: Checkpoint.objects.filter(job=flood).exists(),
        what="the flood's first records",
        agent=agent_backend,
        timeout=5,
    )
    wait_for(  # the records come first, then the event that says what was left out
        lambda: any("only the newest 16" in m for m in events(flood, "CheckpointManifestInvalid")),
        what="the event about the records left out",
        agent=agent_backend,
        timeout=5,
    )
    rows = Checkpoint.objects.filter(job=flood).count()
    assert rows <= 16 * (time.monotonic() - started + 2), rows  # at most 16 a second
    job_stop(job=flood, by=personas["charlie"])


def test_a_checkpoint_record_the_database_refuses_does_not_spare_its_pod_the_watch(
    personas, agent_backend, limits
):
    """A record whose file name the database cannot store (a lone surrogate, which no UTF-8
    encodes) failed the agent's check of its pod, every second one was appended: the disk
    quota, a stop and the max running time that come after the manifest in that check were
    never applied, and the pod filled the disk unstopped."""
    script = """
        import json, os, time
        path = os.path.join(os.environ["PAIWEB_CHECKPOINT_DIR"], "manifest.jsonl")
        filled = False
        for i in range(300):
            with open(path, "a") as manifest:
                manifest.write(json.dumps({"step": i, "file": "\\udc80", "time": time.time()}))
                manifest.write("\\n")
            if i == 10 and not filled:
                for n in range(10):
                    with open(f"f{n}", "wb") as f:
                        f.write(bytes(10 << 20))
                filled = True
            time.sleep(0.1)
        print("never stopped")
    """
    job = submit(personas, command=python(script), name="surrogate")
    job_in(job, JobStatus.FAILED, agent=agent_backend)
    pod = job.pods.get()
    assert pod.reason == "DiskQuotaExceeded", (pod.reason, pod.message, pod_log(pod))
    problems = events(job, "CheckpointManifestInvalid")
    assert any("'\\udc80' cannot be recorded" in m for m in problems), problems


def test_what_a_pod_leaves_behind_is_swept_without_reaching_the_host(
    personas, agent_backend, tmp_path
):
    """Cleanup runs as root over a tree the pod made to trip it: links to host files and to
    its own tree, directories of mode 000, a tree deeper than any path, a FIFO, names with
    newlines, a link in place of a checkpoint. Everything of the pod goes, nothing else."""
    secret = tmp_path / "secret"
    secret.write_text("host")
    command = f"""
        set -e
        for target in {secret} /etc/shadow {tmp_path} /; do ln -s "$target" "l$RANDOM"; done
        python -c 'import os
        for _ in range(600): os.mkdir("d" * 200); os.chdir("d" * 200)
        open("deep", "w").close(); print("deep")'
        mkfifo fifo; mkdir -p locked/inner; : > locked/inner/f; ln -s {tmp_path} locked/up
        chmod 000 locked/inner locked; chmod 000 .
        cd "$PAIWEB_CHECKPOINT_DIR"; : > "$(printf 'new\\nline')"; mkfifo manifest.jsonl
        ln -s {secret} ckpt-000000000009.pkl; ln -s {tmp_path} sub; chmod 000 .; echo left
    """
    job = submit(personas, command=textwrap.dedent(command), name="leftovers")
    job_in(job, JobStatus.SUCCEEDED, JobStatus.FAILED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "deep\nleft" in log, log
    job_dir = Path(agent_backend.pod_work_root) / job.job_id
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(days=2))
    result = job_dirs_sweep(
        root=Path(agent_backend.pod_work_root),
        now=timezone.now(),
        retention=timedelta(hours=1),
        keep_checkpoints=2,
    )
    assert job.job_id in result.swept and job.job_id not in result.failed, result
    assert sorted(p.name for p in job_dir.iterdir()) == [".paiweb-swept", "checkpoints", "logs"]
    assert list((job_dir / "checkpoints").iterdir()) == []
    assert secret.read_text() == "host" and sorted(tmp_path.iterdir()) == [secret]


def test_the_agent_refuses_to_start_where_it_cannot_isolate_pods(tmp_path):
    bare = tmp_path / "bin"  # a PATH without bubblewrap, iproute2 or util-linux
    bare.mkdir()
    env = {
        **os.environ,
        "PATH": str(bare),
        "SANDBOX": "strict",
        "PAIWEB_VAR_DIR": str(tmp_path / "var"),
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "agent", "--nodes", "gpu-node-0"],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "cannot isolate pods" in done.stderr and "bubblewrap is not installed" in done.stderr
    assert "SANDBOX=insecure" in done.stderr
