"""GetJobMetrics of real pods, sampled by a real node agent, read through the SDK: a pod
that burns one core, holds 200 MiB, sends bytes to itself over loopback and writes a file
gets the figures of what it did (it measures its own CPU rate and times its phases), and an
idle pod beside it does not."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from statistics import mean

import pytest
from alibabacloud_pai_dlc20201203.models import GetJobMetricsRequest

from apps.agent.models import PodMetricSample
from tests.integration.test_agent_pods import (  # noqa: F401 (fixtures)
    agent_backend,
    job_in,
    pod_log,
    running_agent,
    submit,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

MIB = 1 << 20
# The pod: 200 MiB held throughout; then ~1 core for 8 s (its own CPU rate printed), 64 MiB
# to itself over TCP on 127.0.0.1, 32 MiB written to a file and fsynced; each phase's wall
# times printed as JSON; then it idles, holding the memory, until stopped.
WORKLOAD = r"""
import json, os, socket, threading, time
held = b"\x01" * (200 << 20)
def mark(**kw): print("PHASE " + json.dumps(kw), flush=True)
time.sleep(3)
t0, c0 = time.time(), time.process_time()
while time.time() - t0 < 8: pass
mark(busy=[t0, time.time()], cpu=(time.process_time() - c0) / (time.time() - t0))
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
def sink():
    conn, _ = server.accept()
    while conn.recv(1 << 20): pass
threading.Thread(target=sink, daemon=True).start()
client = socket.create_connection(server.getsockname())
t1 = time.time(); client.sendall(b"x" * (64 << 20)); client.close()
time.sleep(1); mark(net=[t1, time.time()])
t2 = time.time()
with open("blob", "wb") as f: f.write(os.urandom(32 << 20)); f.flush(); os.fsync(f.fileno())
mark(disk=[t2, time.time()])
print("DONE", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def agent(django_db_setup, django_db_blocker):
    """An agent that samples its pods every second."""
    with running_agent(django_db_blocker, POD_METRICS_SECONDS="1") as process:
        yield process


def _phases(log: str) -> dict:
    found = {}
    for line in re.findall(r"^PHASE (.*)$", log, flags=re.M):
        found.update(json.loads(line))
    return found


def _series(dlc, job_id: str, metric: str, start: datetime) -> list[tuple[float, float]]:
    """One pod's series through the SDK, one point per sample (TimeStep 1s), as
    (epoch seconds, value)."""
    request = GetJobMetricsRequest(
        metric_type=metric,
        start_time=start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        end_time=(datetime.now(UTC) + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        time_step="1s",
    )
    pods = dlc.get_job_metrics(job_id, request).body.pod_metrics
    assert len(pods) <= 1
    return [(m.time / 1000, m.value) for m in pods[0].metrics] if pods else []


def _total(pod, field: str, since: float, until: float) -> float:
    """Σ rate × interval over the pod's samples whose interval lies in [since, until]. The
    stored times are when each round was stored, the rates are over the readings' own
    intervals: the two differ by the rounds' jitter, a few percent at most."""
    rows = list(pod.metric_samples.order_by("at").values_list("at", field))
    total = 0.0
    for (before, _), (at, value) in zip(rows, rows[1:], strict=False):
        if since <= before.timestamp() and at.timestamp() <= until and value is not None:
            total += value * (at - before).total_seconds()
    return total


def test_a_running_pods_metrics_are_what_it_did(personas, agent_backend, dlc):
    start = datetime.now(UTC).replace(microsecond=0)
    busy = submit(personas, command=f"python3 -c '{WORKLOAD}'", gpu=0, name="burner", memory=1024)
    idle = submit(personas, command="sleep 600", gpu=0, name="idler", memory=1024)
    job_in(busy, "Running", agent=agent_backend)
    pod = busy.pods.get()
    wait_for(lambda: "DONE" in pod_log(pod), what="the workload", agent=agent_backend, timeout=60)
    phases = _phases(pod_log(pod))
    # a few samples of the idle tail (stored a second apart, later on a loaded machine)
    tail_from = datetime.fromtimestamp(phases["disk"][1] + 4, UTC)
    for job in (busy, idle):
        wait_for(
            lambda job=job: PodMetricSample.objects.filter(
                pod__job=job, at__gte=tail_from
            ).exists(),
            what="samples after the workload",
            agent=agent_backend,
            timeout=30,
        )
    (t0, t1), own_rate = phases["busy"], phases["cpu"]

    cpu = _series(dlc, busy.job_id, "CpuCoreUsage", start)
    # each sample is the mean over the second before it: those wholly inside the busy phase
    during = [v for at, v in cpu if t0 + 1.5 <= at <= t1 - 0.2]
    assert len(during) >= 4, cpu
    assert abs(mean(during) - own_rate) < 0.15, (during, own_rate)
    assert max(during) <= 1.1  # one thread: at most one core (and the sampling jitter)
    after = [v for at, v in cpu if at >= phases["disk"][1] + 1.5]
    assert after and max(after) < 0.1, cpu

    memory = _series(dlc, busy.job_id, "MemoryUsage", start)
    # (a point ends a second after its time: the last one of the phase may see the 64 MiB
    # the network phase allocates next)
    held = [v for at, v in memory if t0 + 1 <= at <= t1 - 1]
    assert held and all(200 * MIB <= v <= 260 * MIB for v in held), [v / MIB for v in held]

    # bytes moved, from the stored rates: 64 MiB over loopback counts once in and once out
    received = _total(pod, "net_rx_rate", phases["net"][0] - 3, phases["net"][1] + 3)
    assert 0.9 * 64 * MIB <= received <= 1.25 * 64 * MIB, received / MIB
    written = _total(pod, "disk_write_rate", phases["disk"][0] - 3, phases["disk"][1] + 3)
    assert 0.9 * 32 * MIB <= written <= 1.25 * 32 * MIB, written / MIB
    assert _series(dlc, busy.job_id, "GpuCoreUsage", start) == []  # a CPU pod: absent

    # (its first sample counts the pod's start: the sandbox and the shell starting up)
    idle_cpu = [v for _, v in _series(dlc, idle.job_id, "CpuCoreUsage", start)][1:]
    idle_memory = [v for _, v in _series(dlc, idle.job_id, "MemoryUsage", start)]
    assert idle_cpu and max(idle_cpu) < 0.1, idle_cpu
    assert idle_memory and max(idle_memory) < 50 * MIB, idle_memory
    # the idle job has a network namespace of its own: none of the burner's traffic
    assert not PodMetricSample.objects.filter(pod__job=idle, net_rx_rate__gt=MIB).exists()
