"""Pods of one job on several hosts: real agents on separate network hosts of this machine.

Each test host is a network namespace with an address of its own on a bridge (10.231.0.0/24)
and its own agent (`nsenter --net` keeps the host's files, so the agents share the test
pod work roots and, on SQLite, the database file). Redis and a PostgreSQL database are
reached over the bridge, through a small relay the test runs on this machine's side of it
(10.231.0.1): a host whose link goes down is cut off the broker (no heartbeat) and the
database, as a machine unplugged from the network is. Each agent owns a pod subnet
(POD_CIDR) and links its jobs' namespaces to it; nftables admits only the same job's
addresses on the other host.

The test process plays beat (heartbeat requests, the lost-node watchdog) and the scheduler's
tick: nobody consumes the default queue here.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from apps.agent import netns
from apps.agent.models import NodeAgent, PodProcess
from apps.agent.services import node_queue, nodes_mark_lost
from apps.agent.tasks import agents_ping
from apps.agent.testing import AgentProcess
from apps.cluster.models import Node
from apps.jobs.models import LIVE_POD_STATUSES, Job, JobStatus, Pod, PodStatus
from apps.scheduler.services import scheduler_tick
from tests.integration.test_agent_pods import (  # noqa: F401 (fixtures)
    _purge_queues,
    agent_backend,
    job_in,
    pod_log,
    submit,
    wait_for,
)
from tests.integration.test_pod_isolation import PAIR, python

pytestmark = pytest.mark.django_db(transaction=True)

BRIDGE_NET = "10.231.0"
WORLD = "198.51.100.1"  # a public address (TEST-NET-2), played by a namespace on the bridge
HOSTS = {
    "h1": ("gpu-node-0", "10.232.1.0/24"),
    "h2": ("gpu-node-1", "10.232.2.0/24"),
    "h3": ("gpu-node-2", "10.232.3.0/24"),
}  # h3's agent lets pods out: POD_EGRESS


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _clear_leftovers() -> None:
    """Remove the bridges and namespaces of an earlier run that was killed before its own
    cleanup: a stale bridge holding BRIDGE_NET.1 takes the route to the relays, and the new
    hosts' agents would wait on it for ever."""
    listed = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    for line in listed.stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@")[0]
        if name.startswith("pwtb"):
            subprocess.run(["ip", "link", "delete", name], capture_output=True)
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for line in spaces.stdout.splitlines():
        namespace = line.split()[0] if line.split() else ""
        if namespace.startswith("pwtb-"):
            pids = subprocess.run(
                ["ip", "netns", "pids", namespace], capture_output=True, text=True
            )
            for pid in pids.stdout.split():
                _signal(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)


def _attach(bridge: str, link: str, namespace: str, *, address: str, route: str) -> None:
    """A new namespace with an eth0 on the bridge (the host side named `link`), its address
    and one route."""
    sh("ip", "netns", "add", namespace)
    sh("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
    sh("ip", "link", "set", link, "master", bridge, "up")
    sh("ip", "-n", namespace, "addr", "add", address, "dev", "eth0")
    sh("ip", "-n", namespace, "link", "set", "eth0", "up")
    sh("ip", "-n", namespace, "route", "add", route, "dev", "eth0")


def listen_in(namespace: str) -> tuple[socket.socket, int]:
    """A TCP server on every address of a test host (0.0.0.0 there), accepting quietly."""
    inside = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    found: list = []

    def enter_and_bind() -> None:
        os.setns(inside, os.CLONE_NEWNET)
        found.append(socket.create_server(("0.0.0.0", 0)))
        os.setns(home, os.CLONE_NEWNET)

    thread = threading.Thread(target=enter_and_bind)
    thread.start()
    thread.join(10)
    os.close(inside)
    os.close(home)
    server = found[0]
    return server, server.getsockname()[1]


class Relay:
    """Listens on this machine's side of the bridge and forwards each connection to
    `upstream` on this machine: a (host, port), or the path of a unix socket."""

    def __init__(self, upstream: tuple[str, int] | str) -> None:
        self.upstream = upstream
        self.server = socket.create_server((f"{BRIDGE_NET}.1", 0))
        self.host, self.port = self.server.getsockname()[:2]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.upstream, str):
            upstream = socket.socket(socket.AF_UNIX)
            upstream.settimeout(10)
            upstream.connect(self.upstream)
        else:
            upstream = socket.create_connection(self.upstream, timeout=10)
        upstream.settimeout(None)  # an idle connection (a pool, a pub/sub) stays open
        return upstream

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = self._connect()
        except OSError:
            client.close()
            return

        def copy(src, dst):
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=copy, args=(client, upstream), daemon=True).start()
        copy(upstream, client)

    def close(self) -> None:
        self.server.close()


def _over_the_bridge(database: dict, relays: list[Relay]) -> tuple[dict, str]:
    """The database settings and Redis URL by which a test host's agent reaches this
    machine's services: through relays on the bridge (a SQLite database is a file)."""
    if not database["ENGINE"].endswith("sqlite3"):
        relays.append(
            Relay((database.get("HOST") or "127.0.0.1", int(database.get("PORT") or 5432)))
        )
        database = {**database, "HOST": relays[-1].host, "PORT": relays[-1].port}
    redis = urlsplit(django_settings.REDIS_URL)
    if redis.scheme == "unix":  # the embedded Redis
        relays.append(Relay(redis.path))
        return database, f"redis://{relays[-1].host}:{relays[-1].port}/0"
    relays.append(Relay((redis.hostname or "127.0.0.1", redis.port or 6379)))
    auth = redis.netloc.rpartition("@")[0]
    netloc = f"{auth}@" * bool(auth) + f"{relays[-1].host}:{relays[-1].port}"
    return database, urlunsplit(redis._replace(netloc=netloc))


@pytest.fixture(scope="module")
def hosts(django_db_setup, django_db_blocker):
    """Two test hosts on a bridge, each with its own agent and pod subnet."""
    tag = uuid.uuid4().hex[:6]
    bridge = f"pwtb{tag}"
    names = {h: f"pwtb-{h}-{tag}" for h in HOSTS}
    relays, agents = [], {}
    with django_db_blocker.unblock():
        database = dict(connection.settings_dict)
    # The bridge's subnet, the pod links' names and nftables' table are the machine's: two
    # runs of these tests at once (two test runs on one machine) take turns.
    turn = open(os.path.join(tempfile.gettempdir(), "paiweb-test-hosts.lock"), "w")
    fcntl.flock(turn, fcntl.LOCK_EX)
    _clear_leftovers()
    try:
        sh("ip", "link", "add", bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{BRIDGE_NET}.1/24", "dev", bridge)
        sh("ip", "link", "set", bridge, "up")
        database, redis_url = _over_the_bridge(database, relays)
        for i, (host, namespace) in enumerate(names.items(), start=1):
            _attach(
                bridge,
                f"{bridge}{i}",
                namespace,
                address=f"{BRIDGE_NET}.1{i}/24",
                route=f"{WORLD}/32",
            )
            sh("ip", "-n", namespace, "link", "set", "lo", "up")
            node, cidr = HOSTS[host]
            agent = AgentProcess(
                database=database,
                redis_url=redis_url,
                nodes=node,
                name=f"agent-{host}-{tag}",
                env={
                    "SCHEDULER_MIN_RUN_SECONDS": "0",
                    "SCHEDULER_REQUEUE_BACKOFF_SECONDS": "0",
                    "PAIWEB_AGENT_ADDRESS": f"{BRIDGE_NET}.1{i}",
                    "POD_CIDR": cidr,
                    "POD_EGRESS": "true" if host == "h3" else "false",
                },
            )
            agent.argv = [
                "nsenter",
                f"--net=/run/netns/{namespace}",
                "--",
                *agent.argv,
                "--no-public",
            ]
            agents[host] = agent.start()
        world = f"pwtb-w-{tag}"
        names_world = world
        _attach(bridge, f"{bridge}w", world, address=f"{WORLD}/32", route=f"{BRIDGE_NET}.0/24")
        servers = {
            host: listen_in(namespace)
            for host, namespace in [*names.items(), ("world", names_world)]
        }
        yield {
            "agents": agents,
            "namespaces": names,
            "bridge": bridge,
            "links": {host: f"{bridge}{i}" for i, host in enumerate(names, start=1)},
            "ports": {host: port for host, (_, port) in servers.items()},
        }
        for server, _ in servers.values():
            server.close()
    finally:
        for i, agent in enumerate(agents.values(), start=1):  # a test may leave one cut off
            subprocess.run(["ip", "link", "set", f"{bridge}{i}", "up"], capture_output=True)
            if agent.process is not None:
                _signal(agent.process.pid, signal.SIGCONT)
        for agent in agents.values():
            agent.stop()
            agent.cleanup()
        for relay in relays:
            relay.close()
        _purge_queues()
        for namespace in [*names.values(), f"pwtb-w-{tag}"]:
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
        turn.close()  # the other run's turn


@pytest.fixture
def agent(hosts):
    """agent_backend's agent: the first test host's (for its log and pod work root)."""
    return hosts["agents"]["h1"]


def _only(hosts, *names: str):
    """Only these test hosts' nodes take pods; every agent has reported its pod subnet."""
    Node.objects.exclude(name__in=[HOSTS[n][0] for n in names]).update(status=Node.Status.CORDONED)
    wait_for(
        lambda: (
            agents_ping(timeout=1.0) >= 0
            and NodeAgent.objects.exclude(pod_cidr="").count() == len(HOSTS)
        ),
        what="every agent to report its pod subnet",
        agent=hosts["agents"]["h1"],
    )
    return hosts


@pytest.fixture
def two_hosts(hosts, agent_backend):
    return _only(hosts, "h1", "h2")


@pytest.fixture
def egress_host(hosts, agent_backend):
    return _only(hosts, "h3")


def test_a_job_spans_two_hosts_and_only_its_own_pods_reach_each_other(
    personas, two_hosts, listener_port
):
    ports = two_hosts["ports"]  # each test host listens on all its addresses
    outside = [
        (f"{BRIDGE_NET}.11", ports["h1"]),
        (f"{BRIDGE_NET}.12", ports["h2"]),
        (f"{BRIDGE_NET}.1", listener_port),
        ("169.254.1.1", ports["h1"]),
        ("169.254.1.1", ports["h2"]),
        (WORLD, ports["world"]),
    ]  # egress is off
    script = (
        PAIR
        + f"""
if rank != 0:
    for host, p in {outside!r}:
        try:
            socket.create_connection((host, p), timeout=1); print("REACHED", host, p)
        except OSError:
            print("blocked", host, p)
"""
    )
    pair = submit(personas, command=python(script), pods=2, gpu=3, name="pair")
    processes = wait_for(
        lambda: list(PodProcess.objects.filter(pod__job=pair).order_by("rank")) or None,
        what="the pair's launch",
        agent=two_hosts["agents"]["h1"],
    )
    master_addr, port = processes[0].master_addr, processes[0].master_port
    assert master_addr == netns.job_address(HOSTS["h1"][1], pair.pk)
    probe = f"""
        import socket, time
        found = []
        for _ in range(20):
            for host in ({master_addr!r}, {netns.job_address(HOSTS["h2"][1], pair.pk)!r}):
                try:
                    socket.create_connection((host, {port}), timeout=0.5); found.append(host)
                except OSError:
                    pass
            time.sleep(0.2)
        print("INTRUDED" if found else "unreachable")
    """
    other = submit(
        personas,
        command=python(probe),
        user="charlie",
        ws="ws_b",
        quota="team-b",
        gpu=1,
        name="other",
    )
    job_in(pair, JobStatus.SUCCEEDED, agent=two_hosts["agents"]["h1"])
    job_in(other, JobStatus.SUCCEEDED, agent=two_hosts["agents"]["h1"])
    pods = sorted(pair.pods.all(), key=lambda p: p.index)
    assert {p.node.name for p in pods} == {"gpu-node-0", "gpu-node-1"}  # two hosts
    master = next(p for p in pods if PodProcess.objects.get(pod=p).rank == 0)
    worker = next(p for p in pods if p != master)
    assert "PEERS ['worker-1']" in pod_log(master), pod_log(master)
    worker_log = pod_log(worker)
    assert "REACHED" not in worker_log and worker_log.count("blocked") == len(outside), worker_log
    assert "unreachable" in pod_log(other.pods.get())


@pytest.fixture
def listener_port():
    """Something listening on this machine's side of the bridge: a pod must not reach it."""
    server = socket.create_server(("0.0.0.0", 0))
    yield server.getsockname()[1]
    server.close()


def test_with_egress_a_pod_reaches_public_addresses_and_still_nothing_of_the_platform(
    personas, egress_host, listener_port
):
    ports = egress_host["ports"]
    targets = [
        (WORLD, ports["world"]),
        (f"{BRIDGE_NET}.13", ports["h3"]),
        (f"{BRIDGE_NET}.11", ports["h1"]),
        (f"{BRIDGE_NET}.1", listener_port),
        ("169.254.1.1", ports["h3"]),
    ]
    script = f"""
        import socket
        for host, port in {targets!r}:
            try:
                socket.create_connection((host, port), timeout=1); print("REACHED", host)
            except OSError:
                print("blocked", host)
    """
    job = submit(personas, command=python(script), gpu=1, name="egress")
    job_in(job, JobStatus.SUCCEEDED, agent=egress_host["agents"]["h3"])
    log = pod_log(job.pods.get())
    assert f"REACHED {WORLD}" in log, log
    assert log.count("REACHED") == 1 and log.count("blocked") == len(targets) - 1, log


# --- a host that goes silent ----------------------------------------------------------------

LOST_AFTER = 5.0  # NODE_LOST_AFTER here: seconds of silence before a node is Lost

# Rank 0 listens on MASTER_PORT until every other rank said hello. The first attempt then
# "trains" for minutes (the interruption comes during it); a later one holds its GPUs a few
# seconds more, for the test to look at the cluster while it runs, and ends.
HANDSHAKE = """
import os, socket, time
port, rank = int(os.environ["MASTER_PORT"]), int(os.environ["RANK"])
world, attempt = int(os.environ["WORLD_SIZE"]), int(os.environ["PAIWEB_ATTEMPT"])
if rank == 0:
    server = socket.create_server(("0.0.0.0", port)); server.settimeout(1)
    deadline, peers = time.time() + 30, []
    while time.time() < deadline and len(peers) < world - 1:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            continue
        peers.append(conn.recv(100).decode())
    print("PEERS", sorted(peers), "attempt", attempt, flush=True)
else:
    for _ in range(300):
        try:
            socket.create_connection((os.environ["MASTER_ADDR"], port), timeout=1).sendall(
                b"worker-1")
            print("sent", flush=True); break
        except OSError:
            time.sleep(0.1)
time.sleep(300 if attempt == 0 else 8)
"""
SOLO = 'echo "attempt $PAIWEB_ATTEMPT"; sleep "$([ "$PAIWEB_ATTEMPT" = 0 ] && echo 300 || echo 8)"'


@pytest.fixture
def watchdog(settings):
    """Beat's lost-node rules at a fast pace: a node silent for LOST_AFTER seconds is Lost."""
    settings.NODE_LOST_AFTER = LOST_AFTER
    settings.AGENT_HEARTBEAT_INTERVAL = 1.0


def beat_once() -> None:
    """One round of what beat and the default worker would do here: ask every agent for its
    heartbeat (one second of answers), sweep for lost nodes, tick the scheduler."""
    agents_ping(timeout=1.0)
    nodes_mark_lost(now=timezone.now())
    scheduler_tick(now=timezone.now())


def beat(check, *, what: str, hosts, timeout: float = 30.0):
    """Beat rounds until `check()` holds (each round about a second)."""
    deadline = time.monotonic() + timeout
    while True:
        beat_once()
        if result := check():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}\n{_cluster_state(hosts)}"
            )


def _cluster_state(hosts) -> str:
    """The jobs, pods and nodes as the database has them, and the agents' logs' ends."""
    lines = [
        f"job {j.display_name}: {j.status} attempt {j.attempt} {j.reason_code} {j.pending_reason!r}"
        for j in Job.objects.order_by("pk")
    ]
    lines += [
        f"pod {p.pod_id} on {p.node.name if p.node_id else '-'}: {p.status} {p.reason} "
        f"process {getattr(getattr(p, 'process', None), 'state', '-')}"
        for p in Pod.objects.select_related("node").order_by("pk")
    ]
    lines += [f"node {n.name}: {n.status} {n.last_heartbeat}" for n in Node.objects.all()]
    lines += [f"--- agent {h} ---\n{a.log()[-2500:]}" for h, a in hosts["agents"].items()]
    return "\n".join(lines)


def _node(host: str) -> Node:
    return Node.objects.get(name=HOSTS[host][0])


def _fresh(*jobs: Job) -> list[Job]:
    for job in jobs:
        job.refresh_from_db()
    return list(jobs)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def processes_of(pod_id: str) -> list[int]:
    """Every process on this machine that runs as part of the pod (its environment names
    it): the shim's chain and whatever the command started, in any pid namespace."""
    mark, found = f"\0POD_NAME={pod_id}\0".encode(), []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as environ:
                    if mark in b"\0" + environ.read() + b"\0":
                        found.append(int(entry.name))
            except OSError:  # it ended meanwhile
                pass
    return found


def _jobs_across(personas, hosts) -> tuple[Job, Job]:
    """Two running jobs with pods on h2: `solo` (no AIMaster: one pod of one GPU, on h2) and
    `pair` (AIMaster: two pods of three GPUs, on h1 and h2). Then h3 takes pods too, so
    both fit elsewhere once h2 goes."""
    Node.objects.filter(name=HOSTS["h1"][0]).update(status=Node.Status.CORDONED)
    solo = submit(
        personas,
        command=SOLO,
        user="charlie",
        ws="ws_b",
        quota="team-b",
        gpu=1,
        name="solo",
        grace=2,
    )
    Node.objects.filter(name=HOSTS["h1"][0]).update(status=Node.Status.READY)
    pair = submit(
        personas, command=python(HANDSHAKE), pods=2, gpu=3, aimaster=True, name="pair", grace=2
    )
    beat(
        lambda: all(j.status == JobStatus.RUNNING for j in _fresh(solo, pair)),
        what="solo and pair to run",
        hosts=hosts,
    )
    assert solo.pods.get().node.name == HOSTS["h2"][0]
    assert {p.node.name for p in pair.pods.all()} == {HOSTS["h1"][0], HOSTS["h2"][0]}
    Node.objects.filter(name=HOSTS["h3"][0]).update(status=Node.Status.READY)
    return solo, pair


def _requeued_elsewhere(personas, hosts, *, solo: Job, pair: Job, lost: str) -> float:
    """`lost` went silent just now: its node is Lost after LOST_AFTER seconds, both jobs are
    requeued (a platform interruption: solo not failed, pair's budget untouched), run again
    on the other hosts and succeed, and the Lost node's room is offered to no job. Returns
    the seconds from silence to requeue."""
    silent = time.monotonic()
    beat(
        lambda: _node(lost).status == Node.Status.LOST,
        what=f"{lost}'s node to be Lost",
        hosts=hosts,
        timeout=LOST_AFTER + 15,
    )
    took = time.monotonic() - silent
    assert took >= LOST_AFTER - 1.5  # not before its silence was long enough
    # The pods left on the Lost node may never report their end (a dead machine): they
    # must hold no room, neither on the node nor in their quota, or pair never fits again.
    beat(
        lambda: all(j.attempt == 1 and j.status == JobStatus.RUNNING for j in _fresh(solo, pair)),
        what="solo and pair to run again",
        hosts=hosts,
    )

    # The Lost node has 4 free GPUs and is the only node with room for 2: nobody gets it.
    blocker = submit(
        personas,
        command="echo placed",
        user="charlie",
        ws="ws_b",
        quota="team-b",
        gpu=2,
        name="blocker",
    )
    beat_once()
    beat_once()
    _fresh(blocker, pair)
    assert pair.status == JobStatus.RUNNING  # still holding its GPUs on h1 and h3
    assert blocker.status == JobStatus.QUEUING and blocker.pending_reason, blocker.pending_reason
    beat(
        lambda: all(j.status == JobStatus.SUCCEEDED for j in _fresh(solo, pair, blocker)),
        what="solo, pair and the blocker to succeed",
        hosts=hosts,
    )

    lost_node = HOSTS[lost][0]
    elsewhere = {HOSTS["h1"][0], HOSTS["h3"][0]}
    assert {p.node.name for p in pair.pods.filter(attempt=1)} == elsewhere  # two hosts still
    assert {solo.pods.get(attempt=1).node.name, blocker.pods.get().node.name} <= elsewhere
    assert not Pod.objects.filter(node__name=lost_node).exclude(attempt=0).exists()
    for pod in Pod.objects.filter(node__name=lost_node):
        assert (pod.status, pod.reason) == (PodStatus.FAILED, "NodeLost")
    master = next(p for p in pair.pods.filter(attempt=1) if PodProcess.objects.get(pod=p).rank == 0)
    assert "PEERS ['worker-1'] attempt 1" in pod_log(master), pod_log(master)
    for job in (solo, pair):
        assert (job.restart_times, job.attempt) == (0, 1)
        restart = job.restarts.get()
        assert (restart.cause, restart.counted, restart.number) == ("NodeLost", False, 1)
        back = job.status_history.get(status=JobStatus.QUEUING, reason_code="NodeLost")
        assert f"Node {lost_node} stopped reporting" in back.reason_message
    assert (
        "AIMaster's budget 0/3 is not used"
        in pair.status_history.get(status=JobStatus.QUEUING, reason_code="NodeLost").reason_message
    )
    assert not solo.events.filter(kind="Failed").exists()
    return took


def _stale_pods_end(hosts, *, host: str, stale: list[str]) -> float:
    """`host` is back: its node is Ready again, and its agent stops the pods it kept running
    while it was away (the database says they ended) and reports their exit; no process
    of them is left. The jobs they belonged to are not disturbed. Returns how long it took."""
    back, agent = time.monotonic(), hosts["agents"][host]
    beat(
        lambda: (
            _node(host).status == Node.Status.READY
            and not PodProcess.objects.filter(pod__pod_id__in=stale)
            .exclude(state=PodProcess.State.EXITED)
            .exists()
            and not agent.shims()
            and not any(processes_of(p) for p in stale)
        ),
        what=f"{host} to report again and end its stale pods {stale}",
        hosts=hosts,
        timeout=45,
    )
    for pod in Pod.objects.filter(pod_id__in=stale):
        assert (pod.status, pod.reason) == (PodStatus.FAILED, "NodeLost")  # kept
    assert not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists()
    return time.monotonic() - back


def _live_pods_on(host: str) -> list[str]:
    return list(
        Pod.objects.filter(node__name=HOSTS[host][0], status__in=LIVE_POD_STATUSES).values_list(
            "pod_id", flat=True
        )
    )


def test_a_host_cut_off_the_network_is_lost_and_its_jobs_run_again_elsewhere(
    personas, two_hosts, watchdog
):
    solo, pair = _jobs_across(personas, two_hosts)
    stale = _live_pods_on("h2")
    assert len(stale) == 2 and all(processes_of(p) for p in stale)
    link = two_hosts["links"]["h2"]
    sh("ip", "link", "set", link, "down")
    try:
        took = _requeued_elsewhere(personas, two_hosts, solo=solo, pair=pair, lost="h2")
    finally:
        sh("ip", "link", "set", link, "up")
    came_back = _stale_pods_end(two_hosts, host="h2", stale=stale)
    print(
        f"cut off: Lost and requeued {took:.1f}s after the cut (NODE_LOST_AFTER="
        f"{LOST_AFTER:g}s); back and stale pods ended {came_back:.1f}s after the link"
    )


@contextmanager
def _stop_messages_lost(queue: str):
    """Every pod_stop_task sent to `queue` meanwhile is lost on the way: only the agent's
    watch loop, comparing its pods with the database, can stop them."""
    from apps.agent.tasks import pod_stop_task

    send = pod_stop_task.apply_async

    def lossy(*args, **kwargs):
        return None if kwargs.get("queue") == queue else send(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pod_stop_task, "apply_async", lossy)
        yield


def test_a_frozen_agent_is_lost_and_on_waking_stops_the_pods_it_kept(personas, two_hosts, watchdog):
    agent = two_hosts["agents"]["h2"]
    solo, pair = _jobs_across(personas, two_hosts)
    stale = _live_pods_on("h2")
    os.kill(agent.process.pid, signal.SIGSTOP)
    try:
        with _stop_messages_lost(node_queue(HOSTS["h2"][0])):
            took = _requeued_elsewhere(personas, two_hosts, solo=solo, pair=pair, lost="h2")
        assert agent.shims() and all(processes_of(p) for p in stale)  # kept running there
    finally:
        os.kill(agent.process.pid, signal.SIGCONT)
    came_back = _stale_pods_end(two_hosts, host="h2", stale=stale)
    print(
        f"frozen: Lost and requeued {took:.1f}s after SIGSTOP (NODE_LOST_AFTER="
        f"{LOST_AFTER:g}s); Ready and stale pods ended {came_back:.1f}s after SIGCONT"
    )
