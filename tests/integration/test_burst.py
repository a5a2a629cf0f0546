"""A burst of 400 CreateJob against a real paiweb: `manage.py demo` (web, worker, beat, the
node agent running every pod as a real sandboxed process, its embedded Redis) on a fresh
PostgreSQL database, the official PAI-DLC SDK as the client, 16 requests at a time.

It guards against what an agent with a database connection per supervised pod thread once
did: PostgreSQL's 100 connections ran out ("FATAL: sorry, too many clients already"),
pod_start_task raised OperationalError and 19 jobs stayed in EnvPreparing for minutes.

What must hold (the bounds are about 3x what the 2-core development machine measured):
- every CreateJob answers with a JobId (no 5xx, no error at all);
- within SETTLE_BOUND seconds of the first request every job has been seen Running or
  Succeeded, or waiting with a reason: Queuing with a non-empty pending_reason, or
  Bidding with the reason the console shows (`apps.market.selectors.waiting_reasons`: the
  market stores none for bidding jobs);
- no job is ever seen Failed or Stopped, nor Creating, EnvPreparing or Restarting for
  longer than STUCK_BOUND seconds, and no pod's start stays queued (PodProcess `queued`)
  that long;
- no OperationalError, no "too many clients" and no task that raised in the demo's output;
- the demo's sessions on its database stay under PEAK_BOUND at every sample (0.2 s), and
  the agent's own stay a fixed few, however many pods it runs.

The database is read directly (psycopg) to keep the polling cheap: a `manage.py shell` per
poll would cost more than the burst's own queries.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_pai_dlc20201203.models import CreateJobRequest
from alibabacloud_tea_openapi.models import Config
from django.conf import settings

from apps.agent.models import PodProcess
from apps.jobs.models import Job, JobEvent, Pod
from apps.ops.testing import DemoProcess
from apps.workspaces.models import Workspace

pytestmark = pytest.mark.own_database  # a demo on a PostgreSQL database of its own

SERVER = "postgresql://postgres@127.0.0.1:5432"  # trust auth; a database of our own on it
JOBS, THREADS = 400, 16
# Measured here (2 cores, PostgreSQL 15, bubblewrap sandboxes, ~130 pods running at once):
# the 400 CreateJob are answered in 5-13 s (p50 0.2-0.4 s each), and the last job settles
# 16-21 s after the first request (26 s with another test suite running beside it).
SETTLE_BOUND = 60.0
# A pod's start waits 4-8 s at most from queued to running; a job waits in Creating ~10 s
# at most for its admission. Four times that and it is stuck.
STUCK_BOUND = 30.0
# The demo holds 20 sessions whatever the number of pods: the web 8 (2 gunicorn workers x
# 4 threads), the agent 10 (a fixed set: its start/stop threads, the watch and reconcile
# loops, housekeeping, remote control), the worker 2 (one per process), beat none. One
# session per pod would be over 130.
PEAK_BOUND = 60
AGENT_BOUND = 16
COMMAND = "echo started; sleep 30"
NOT_IN_BURST = ("Failed", "Stopped")
TRANSIENT = ("Creating", "EnvPreparing", "Restarting")

# (kind, how many, user, quota or "" for the public pool); 400 in all.
KINDS = (
    ("gpu-team-a", 110, "alice", "team-a"),  # 1 GPU each: 16 run in quota, the rest queue
    ("gpu-team-b", 60, "charlie", "team-b"),
    ("idle-research", 40, "admin", "research"),  # Acceptable: own quota, then idle GPUs
    ("only-idle-research", 20, "admin", "research"),
    ("cpu-team-a", 55, "bob", "team-a"),  # CPU only: all of them fit
    ("cpu-team-b", 55, "charlie", "team-b"),
    ("public", 30, "alice", ""),  # pay-as-you-go ecs.g7.xlarge
    ("spot", 30, "charlie", ""),  # bids 90% of the original price
)


def _access_keys() -> dict[str, tuple[str, str]]:
    """The demo cluster file's AccessKey pair of each user."""
    cluster = tomllib.loads((Path(settings.BASE_DIR) / "examples/demo-cluster.toml").read_text())
    return {key["user"]: (key_id, key["secret"]) for key_id, key in cluster["access_keys"].items()}


def create_job_body(kind: str, i: int, *, workspace_id: str, quota: str) -> dict:
    worker: dict = {"Type": "Worker", "PodCount": 1, "Image": "python:3.12"}
    body = {
        "WorkspaceId": workspace_id,
        "DisplayName": f"{kind}-{i}",
        "JobType": "PyTorchJob",
        "UserCommand": COMMAND,
        "JobSpecs": [worker],
        "ResourceId": quota,
    }
    settings_: dict = {}
    if kind.startswith("cpu"):
        worker["ResourceConfig"] = {"CPU": "1", "Memory": "2Gi"}
    elif quota:
        worker["ResourceConfig"] = {"CPU": "4", "Memory": "16Gi", "GPU": "1"}
    else:
        worker["EcsSpec"] = "ecs.g7.xlarge"
    if kind == "spot":
        worker["SpotSpec"] = {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.9}
    if "idle" in kind:
        settings_["OversoldType"] = (
            "ForceQuotaOverSold" if kind.startswith("only") else "AcceptQuotaOverSold"
        )
    # Borrowers and spot jobs may lose their pods by design (reclaim, preemption): with
    # AIMaster they wait again instead of failing. Every third GPU job has it too.
    if "idle" in kind or kind == "spot" or (kind.startswith("gpu") and i % 3 == 0):
        settings_["EnableErrorMonitoringInAIMaster"] = True
        settings_["ErrorMonitoringArgs"] = "--max-num-of-job-restart=3"
    if settings_:
        body["Settings"] = settings_
    return body


@dataclass
class Burst:
    """What the test saw, for its assertions and its figures."""

    started: float = 0.0
    submitted: float = 0.0  # seconds from the first request to the last answer
    job_ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    settled_at: dict[str, float] = field(default_factory=dict)  # job id → seconds from start
    bad: dict[str, str] = field(default_factory=dict)  # job id → what was wrong, first seen
    peak: int = 0
    holders: dict[str, int] = field(default_factory=dict)  # process → most connections held


def _submit_all(base: str, keys: dict, workspaces: dict[str, str], burst: Burst) -> None:
    """JOBS CreateJob requests, THREADS at a time, each thread with its own SDK clients."""
    local = threading.local()
    team = {"alice": "team-a", "bob": "team-a", "charlie": "team-b", "admin": "research"}
    order = [(kind, i, user, quota) for kind, count, user, quota in KINDS for i in range(count)]
    order.sort(key=lambda item: uuid.uuid5(uuid.NAMESPACE_OID, f"{item[0]}{item[1]}").hex)

    def client(user: str) -> DLCClient:
        clients = local.__dict__.setdefault("clients", {})
        if user not in clients:
            clients[user] = DLCClient(
                Config(
                    access_key_id=keys[user][0],
                    access_key_secret=keys[user][1],
                    endpoint=base,
                    protocol="http",
                    region_id="cn-hangzhou",
                    read_timeout=60000,
                    connect_timeout=10000,
                )
            )
        return clients[user]

    def create(item) -> None:
        kind, i, user, quota = item
        body = create_job_body(kind, i, workspace_id=workspaces[team[user]], quota=quota)
        began = time.monotonic()
        try:
            job_id = client(user).create_job(CreateJobRequest().from_map(body)).body.job_id
        except Exception as exc:  # the SDK raises on every non-2xx answer
            burst.errors.append(f"{kind}-{i}: {type(exc).__name__}: {str(exc)[:300]}")
            return
        burst.latencies.append(time.monotonic() - began)
        burst.job_ids.append(job_id)

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(create, order))
    burst.submitted = time.monotonic() - burst.started


def _sample_connections(
    database: str, stop: threading.Event, burst: Burst, children: dict[str, int]
) -> None:
    """Every 0.2 s: how many sessions the demo has on its database (from the server's
    maintenance database, so the sampler itself is not counted); every second, which
    process holds them."""
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        last_breakdown = 0.0
        while not stop.is_set():
            (count,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                "application_name <> 'burst-test'",
                [database],
            ).fetchone()
            burst.peak = max(burst.peak, count)
            if time.monotonic() - last_breakdown >= 1.0:
                last_breakdown = time.monotonic()
                for name, held in _holders(children).items():
                    burst.holders[name] = max(burst.holders.get(name, 0), held)
            stop.wait(0.2)


def _holders(children: dict[str, int]) -> dict[str, int]:
    """Client connections to PostgreSQL per demo child (web, worker, agent, beat…), by the
    sockets' owners (`ss -p`) and their parent chains."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", "established", "dport", "=", ":5432"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    by_pid = {pid: name for name, pid in children.items()}
    counts: dict[str, int] = {}
    for pid in re.findall(r"pid=(\d+)", out):
        name = _owner(int(pid), by_pid)
        counts[name] = counts.get(name, 0) + 1
    return counts


def _owner(pid: int, by_pid: dict[int, str]) -> str:
    for _ in range(10):
        if pid in by_pid:
            return by_pid[pid]
        if pid == os.getpid():
            return "this test"
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return "other"


def _watch(conn: psycopg.Connection, burst: Burst) -> int:
    """One look at every job: note those that settled, and anything wrong. Returns how
    many have not settled yet."""
    rows = conn.execute(
        f"SELECT job_id, status, pending_reason, extract(epoch FROM now() - status_changed_at) "
        f"FROM {Job._meta.db_table}"
    ).fetchall()
    now = time.monotonic() - burst.started
    for job_id, status, reason, in_state in rows:
        if status in ("Running", "Succeeded") or (status == "Queuing" and reason):
            burst.settled_at.setdefault(job_id, now)
        elif status in NOT_IN_BURST:
            burst.bad.setdefault(job_id, f"{status}")
        elif status in TRANSIENT and in_state > STUCK_BOUND:
            burst.bad.setdefault(job_id, f"{status} for {in_state:.0f}s")
    for job_id, waited in conn.execute(
        f"SELECT j.job_id, extract(epoch FROM now() - p.queued_at) "
        f"FROM {PodProcess._meta.db_table} p JOIN {Pod._meta.db_table} pod "
        "ON pod.id = p.pod_id "
        f"JOIN {Job._meta.db_table} j ON j.id = pod.job_id "
        "WHERE p.state = 'queued' AND p.queued_at < now() - make_interval(secs => %s)",
        [STUCK_BOUND],
    ).fetchall():
        burst.bad.setdefault(job_id, f"a pod's start queued for {waited:.0f}s")
    return len(rows) - len(burst.settled_at)


# In the demo, once a second: each Bidding spot job's reason, as the console shows it. (The
# market stores none for them; `waiting_reasons` judges their bids against its quotes.)
BIDDING_REASONS = """
import json, time
from apps.jobs.models import Job, JobStatus
from apps.market.selectors import waiting_reasons
while True:
    jobs = list(Job.objects.filter(status=JobStatus.BIDDING))
    reasons = waiting_reasons(jobs=jobs)
    print(json.dumps({job.job_id: reasons[job.pk] for job in jobs if reasons.get(job.pk)}),
          flush=True)
    time.sleep(1)
"""


def _watch_bidding(demo: DemoProcess, burst: Burst) -> subprocess.Popen:
    """A job the helper saw Bidding with a reason has settled (its connection is the
    test's: PGAPPNAME keeps it out of the demo's count)."""
    helper = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", BIDDING_REASONS],
        cwd=settings.BASE_DIR,
        env={**demo.env, "PGAPPNAME": "burst-test"},
        stdout=subprocess.PIPE,
        text=True,
    )

    def read() -> None:
        for line in helper.stdout:
            if not line.startswith("{"):  # the shell's own notices
                continue
            for job_id in json.loads(line):
                burst.settled_at.setdefault(job_id, time.monotonic() - burst.started)

    threading.Thread(target=read, daemon=True).start()
    return helper


def _details(conn: psycopg.Connection, job_ids, demo: DemoProcess | None = None) -> list[str]:
    """Each job (the first 20): its status and reasons, its pods' processes, and what the
    demo logged about them."""
    job_ids = list(job_ids)[:20]
    rows = conn.execute(
        f"SELECT job_id, display_name, status, reason_code, reason_message, pending_reason "
        f"FROM {Job._meta.db_table} WHERE job_id = ANY(%s) ORDER BY id",
        [job_ids],
    )
    out = [" | ".join(str(v)[:200] for v in row) for row in rows]
    for row in conn.execute(
        f"SELECT pod.pod_id, pod.status, p.state, p.agent, p.queued_at, p.started_at "
        f"FROM {Pod._meta.db_table} pod JOIN {Job._meta.db_table} j ON j.id = pod.job_id "
        f"LEFT JOIN {PodProcess._meta.db_table} p ON p.pod_id = pod.id "
        "WHERE j.job_id = ANY(%s) ORDER BY pod.id",
        [job_ids],
    ):
        out.append("  pod " + " | ".join(str(v) for v in row))
    for row in conn.execute(
        f"SELECT j.job_id, e.at, e.kind, e.message FROM {JobEvent._meta.db_table} e "
        f"JOIN {Job._meta.db_table} j ON j.id = e.job_id WHERE j.job_id = ANY(%s) "
        "ORDER BY e.id",
        [job_ids],
    ):
        out.append("  event " + " | ".join(str(v)[:200] for v in row))
    if demo is not None:
        out += [
            f"  log {line}" for line in demo.lines if any(job_id in line for job_id in job_ids)
        ][:40]
    return out


def _figures(conn: psycopg.Connection, burst: Burst) -> str:
    waits = conn.execute(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - "
        "queued_at)), max(extract(epoch FROM started_at - queued_at)) "
        f"FROM {PodProcess._meta.db_table} WHERE started_at IS NOT NULL"
    ).fetchone()
    statuses = dict(
        conn.execute(
            f"SELECT status, count(*) FROM {Job._meta.db_table} GROUP BY status"
        ).fetchall()
    )
    latencies = sorted(burst.latencies) or [float("nan")]
    settled = max(burst.settled_at.values(), default=float("nan"))
    return (
        f"\nburst: {len(burst.job_ids)} CreateJob answered in {burst.submitted:.1f}s "
        f"(p50 {latencies[len(latencies) // 2]:.2f}s, max {latencies[-1]:.2f}s); the last "
        f"job settled {settled:.1f}s after the first request; now {statuses}; pod start "
        f"queued→running p50 {waits[0] or 0:.1f}s, max {waits[1] or 0:.1f}s; peak "
        f"{burst.peak} sessions, most per process {burst.holders}"
    )


STOP_ALL = """
import json
from apps.core.errors import ApplicationError
from apps.jobs.models import FINISHED_STATUSES, Job
from apps.jobs.services import job_stop
stopped = 0
for job in Job.objects.exclude(status__in=FINISHED_STATUSES):
    try:
        job_stop(job=job, by=None); stopped += 1
    except ApplicationError:  # it ended meanwhile
        pass
print(json.dumps({"stopped": stopped}))
"""


def _create_database() -> str:
    name = f"paiweb_burst_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop_database(name: str) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_burst_of_400_create_jobs_settles_and_holds_few_connections():
    database = _create_database()
    demo = conn = helper = None
    stop_sampling, burst = threading.Event(), Burst()
    try:
        demo = DemoProcess(
            backend="agent",
            env={"DATABASE_URL": f"{SERVER}/{database}", "SCHEDULER_MIN_RUN_SECONDS": "0"},
        )
        demo.wait_for(r"paiweb demo is running")
        conn = psycopg.connect(
            f"{SERVER}/{database}", autocommit=True, application_name="burst-test"
        )
        workspaces = {
            name: str(pk)
            for name, pk in conn.execute(  # WorkspaceId is the pk
                f"SELECT name, id FROM {Workspace._meta.db_table}"
            ).fetchall()
        }
        sampler = threading.Thread(
            target=_sample_connections,
            daemon=True,
            args=(database, stop_sampling, burst, demo.pids()),
        )
        sampler.start()
        helper = _watch_bidding(demo, burst)

        burst.started = time.monotonic()
        submitter = threading.Thread(
            target=_submit_all,
            daemon=True,
            args=(f"127.0.0.1:{demo.port}", _access_keys(), workspaces, burst),
        )
        submitter.start()
        while time.monotonic() - burst.started < SETTLE_BOUND:
            unsettled = _watch(conn, burst)
            if not (unsettled or submitter.is_alive()):
                break
            time.sleep(0.5)
        submitter.join(timeout=60)
        print(_figures(conn, burst))

        assert not burst.errors, f"{len(burst.errors)} CreateJob failed:\n" + "\n".join(
            burst.errors[:20]
        )
        assert len(burst.job_ids) == JOBS
        unsettled = set(burst.job_ids) - set(burst.settled_at)
        assert not unsettled, (
            f"{len(unsettled)} jobs neither ran nor waited with a reason within "
            f"{SETTLE_BOUND:.0f}s:\n" + "\n".join(_details(conn, unsettled, demo))
        )
        assert not burst.bad, f"{len(burst.bad)} jobs went wrong: {burst.bad}\n" + "\n".join(
            _details(conn, burst.bad, demo)
        )
        logged = [
            line
            for line in demo.lines
            if re.search(r"OperationalError|too many clients|raised unexpected", line)
        ]
        assert not logged, "\n".join(logged[:20])
        assert burst.peak < PEAK_BOUND, (burst.peak, burst.holders)
        assert 0 < burst.holders.get("agent", 0) <= AGENT_BOUND, burst.holders
    finally:
        stop_sampling.set()
        if helper is not None:
            helper.kill()
            helper.wait()
        try:
            if demo is not None:
                _stop_everything(demo, conn)
        finally:
            if conn is not None:
                conn.close()
            if demo is not None:
                demo.stop()
                demo.kill_shims()
                shutil.rmtree(demo.var, ignore_errors=True)
            _drop_database(database)


def _stop_everything(
    demo: DemoProcess, conn: psycopg.Connection | None, timeout: float = 60.0
) -> None:
    """Stop every job and wait until no pod's process runs (so the demo leaves none)."""
    demo.python(STOP_ALL)
    deadline = time.monotonic() + timeout
    while conn is not None and time.monotonic() < deadline:
        (live,) = conn.execute(
            f"SELECT count(*) FROM {PodProcess._meta.db_table} "
            "WHERE state IN ('queued', 'starting', 'running')"
        ).fetchone()
        if not live:
            return
        time.sleep(0.5)
