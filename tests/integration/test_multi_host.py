"""Pods of one job on two hosts: real agents on separate network hosts of this machine.

Each test host is a network namespace with an address of its own on a bridge (10.231.0.0/24)
and its own agent (`nsenter --net` keeps the host's files, so the agents share the test
database and the embedded Redis socket; a TCP database or Redis is reached through a small
relay the test runs inside each test host). Each agent owns a pod subnet (POD_CIDR) and
links its jobs' namespaces to it; nftables admits only the same job's addresses on the
other host.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.db import connection

from apps.agent import netns
from apps.agent.models import NodeAgent, PodProcess
from apps.agent.tasks import agents_ping
from apps.agent.testing import AgentProcess
from apps.cluster.models import Node
from apps.jobs.models import JobStatus
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
HOSTS = {"h1": ("gpu-node-0", "10.232.1.0/24"), "h2": ("gpu-node-1", "10.232.2.0/24"),
         "h3": ("gpu-node-2", "10.232.3.0/24")}  # h3's agent lets pods out: POD_EGRESS


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


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
    """Listens on 127.0.0.1:<port> inside a test host and forwards each connection to the
    same port on this machine's loopback (a thread may enter a network namespace alone)."""

    def __init__(self, namespace: str, port: int) -> None:
        self.port = port
        inside = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
        home = os.open("/proc/self/ns/net", os.O_RDONLY)
        ready = threading.Event()

        def listen() -> None:
            os.setns(inside, os.CLONE_NEWNET)
            self.server = socket.create_server(("127.0.0.1", port))
            os.setns(home, os.CLONE_NEWNET)  # connections out start from this machine
            ready.set()
            while True:
                try:
                    client, _ = self.server.accept()
                except OSError:
                    return
                threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

        threading.Thread(target=listen, daemon=True).start()
        ready.wait(10)
        os.close(inside)
        os.close(home)

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.port), timeout=10)
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


def _tcp_ports() -> list[int]:
    ports = []
    db = connection.settings_dict
    if not db["ENGINE"].endswith("sqlite3"):
        ports.append(int(db.get("PORT") or 5432))
    redis = urlsplit(django_settings.REDIS_URL)
    if redis.scheme in {"redis", "rediss"}:
        ports.append(redis.port or 6379)
    return ports


@pytest.fixture(scope="module")
def hosts(django_db_setup, django_db_blocker):
    """Two test hosts on a bridge, each with its own agent and pod subnet."""
    tag = uuid.uuid4().hex[:6]
    bridge = f"pwtb{tag}"
    names = {h: f"pwtb-{h}-{tag}" for h in HOSTS}
    relays, agents = [], {}
    with django_db_blocker.unblock():
        database = dict(connection.settings_dict)
    try:
        sh("ip", "link", "add", bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{BRIDGE_NET}.1/24", "dev", bridge)
        sh("ip", "link", "set", bridge, "up")
        for i, (host, namespace) in enumerate(names.items(), start=1):
            sh("ip", "netns", "add", namespace)
            sh("ip", "link", "add", f"{bridge}{i}", "type", "veth", "peer", "name", "eth0",
               "netns", namespace)
            sh("ip", "link", "set", f"{bridge}{i}", "master", bridge, "up")
            sh("ip", "-n", namespace, "addr", "add", f"{BRIDGE_NET}.1{i}/24", "dev", "eth0")
            sh("ip", "-n", namespace, "link", "set", "eth0", "up")
            sh("ip", "-n", namespace, "link", "set", "lo", "up")
            sh("ip", "-n", namespace, "route", "add", f"{WORLD}/32", "dev", "eth0")
            relays += [Relay(namespace, port) for port in _tcp_ports()]
            node, cidr = HOSTS[host]
            agent = AgentProcess(
                database=database, redis_url=django_settings.REDIS_URL, nodes=node,
                name=f"agent-{host}-{tag}",
                env={"SCHEDULER_MIN_RUN_SECONDS": "0", "SCHEDULER_REQUEUE_BACKOFF_SECONDS": "0",
                     "PAIWEB_AGENT_ADDRESS": f"{BRIDGE_NET}.1{i}", "POD_CIDR": cidr,
                     "POD_EGRESS": "true" if host == "h3" else "false"})
            agent.argv = ["nsenter", f"--net=/run/netns/{namespace}", "--", *agent.argv,
                          "--no-public"]
            agents[host] = agent.start()
        world = f"pwtb-w-{tag}"
        names_world = world
        sh("ip", "netns", "add", world)
        sh("ip", "link", "add", f"{bridge}w", "type", "veth", "peer", "name", "eth0",
           "netns", world)
        sh("ip", "link", "set", f"{bridge}w", "master", bridge, "up")
        sh("ip", "-n", world, "addr", "add", f"{WORLD}/32", "dev", "eth0")
        sh("ip", "-n", world, "link", "set", "eth0", "up")
        sh("ip", "-n", world, "route", "add", f"{BRIDGE_NET}.0/24", "dev", "eth0")
        servers = {host: listen_in(namespace) for host, namespace in
                   [*names.items(), ("world", names_world)]}
        yield {"agents": agents, "namespaces": names, "bridge": bridge,
               "ports": {host: port for host, (_, port) in servers.items()}}
        for server, _ in servers.values():
            server.close()
    finally:
        for agent in agents.values():
            agent.stop()
            agent.cleanup()
        for relay in relays:
            relay.close()
        _purge_queues()
        for namespace in [*names.values(), f"pwtb-w-{tag}"]:
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True)


@pytest.fixture
def agent(hosts):
    """agent_backend's agent: the first test host's (for its log and pod work root)."""
    return hosts["agents"]["h1"]


def _only(hosts, *names: str):
    """Only these test hosts' nodes take pods; every agent has reported its pod subnet."""
    Node.objects.exclude(name__in=[HOSTS[n][0] for n in names]).update(
        status=Node.Status.CORDONED)
    wait_for(lambda: agents_ping(timeout=1.0) >= 0 and
             NodeAgent.objects.exclude(pod_cidr="").count() == len(HOSTS),
             what="every agent to report its pod subnet", agent=hosts["agents"]["h1"])
    return hosts


@pytest.fixture
def two_hosts(hosts, agent_backend):
    return _only(hosts, "h1", "h2")


@pytest.fixture
def egress_host(hosts, agent_backend):
    return _only(hosts, "h3")


def test_a_job_spans_two_hosts_and_only_its_own_pods_reach_each_other(personas, two_hosts,
                                                                      listener_port):
    ports = two_hosts["ports"]  # each test host listens on all its addresses
    outside = [(f"{BRIDGE_NET}.11", ports["h1"]), (f"{BRIDGE_NET}.12", ports["h2"]),
               (f"{BRIDGE_NET}.1", listener_port), ("169.254.1.1", ports["h1"]),
               ("169.254.1.1", ports["h2"]), (WORLD, ports["world"])]  # egress is off
    script = PAIR + f"""
if rank != 0:
    for host, p in {outside!r}:
        try:
            socket.create_connection((host, p), timeout=1); print("REACHED", host, p)
        except OSError:
            print("blocked", host, p)
"""
    pair = submit(personas, command=python(script), pods=2, gpu=3, name="pair")
    processes = wait_for(lambda: list(PodProcess.objects.filter(pod__job=pair)
                                      .order_by("rank")) or None,
                         what="the pair's launch", agent=two_hosts["agents"]["h1"])
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
    other = submit(personas, command=python(probe), user="charlie", ws="ws_b", quota="team-b",
                   gpu=1, name="other")
    job_in(pair, JobStatus.SUCCEEDED, agent=two_hosts["agents"]["h1"])
    job_in(other, JobStatus.SUCCEEDED, agent=two_hosts["agents"]["h1"])
    pods = sorted(pair.pods.all(), key=lambda p: p.index)
    assert {p.node.name for p in pods} == {"gpu-node-0", "gpu-node-1"}  # two hosts
    master = next(p for p in pods if PodProcess.objects.get(pod=p).rank == 0)
    worker = next(p for p in pods if p != master)
    assert "PEERS ['worker-1']" in pod_log(master), pod_log(master)
    worker_log = pod_log(worker)
    assert "REACHED" not in worker_log and worker_log.count("blocked") == len(outside), \
        worker_log
    assert "unreachable" in pod_log(other.pods.get())


@pytest.fixture
def listener_port():
    """Something listening on this machine's side of the bridge: a pod must not reach it."""
    server = socket.create_server(("0.0.0.0", 0))
    yield server.getsockname()[1]
    server.close()


def test_with_egress_a_pod_reaches_public_addresses_and_still_nothing_of_the_platform(
        personas, egress_host, listener_port):
    ports = egress_host["ports"]
    targets = [(WORLD, ports["world"]), (f"{BRIDGE_NET}.13", ports["h3"]),
               (f"{BRIDGE_NET}.11", ports["h1"]), (f"{BRIDGE_NET}.1", listener_port),
               ("169.254.1.1", ports["h3"])]
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
