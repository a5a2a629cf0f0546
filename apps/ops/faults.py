"""Fault injection: a real paiweb under `kill -9`, and what must hold afterwards.

`run()` starts `manage.py demo` (web, worker, beat, node agent, Flower and an embedded Redis)
on a fresh PostgreSQL database, submits jobs of every kind (quota jobs, distributed ones,
idle borrowers, Only Idle, public pay-as-you-go, spot, CPU-only, and jobs whose own command
fails), SIGKILLs the worker, beat, agent and web at random moments (the demo starts each
again), waits for every job to settle and checks the invariants:

- no node over capacity and no quota's in-quota use over its min, sampled all along;
- every job terminal, or waiting with a reason;
- no pod shown Running that has ended, nor ended with its process running, and never two
  live attempts of one pod (job, role, index), sampled all along;
- no event recorded twice (a pod started, a job submitted, failed or stopped; or two alike);
- no pod shown Running without a live process for longer than one heartbeat period (outside
  the moments its agent was down: a pod that ends then is reported on re-adoption, with
  its real end time);
- every pod-minute of public and spot pods billed exactly once: the billed minutes are the
  ones its process ran, less a minute its slot's earlier pod ran in (`pricing.bill_minutes`);
- no job failed by the platform: a Failed job is one whose own command failed, or a
  reclaimed or preempted one without AIMaster (by design), never NodeLost, AgentRestarted…;
- no orphan process: no shim and no process of a pod's uid once every job has ended.

Beyond SIGKILL a round can freeze its victims (SIGSTOP, then SIGCONT a few seconds later),
kill the embedded Redis and pods' shims, submit jobs through the SDK while the web dies
(a request that got no answer is sent again, as a client would: an answered job must exist,
and a job whose answer was lost is counted as a duplicate the retry made), and kill -9
`apply_cluster` and an admin's drain part-way (the cluster must still apply, and the drained
node must end Cordoned with its jobs moved).

tests/integration/test_faults.py runs a bounded round; `benchmarks/faults.py` runs the soak
and prints the figures. The functions marked "in the demo" run inside the demo's own Django
(`DemoProcess.python`), on its database.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from apps.agent.runner import process_alive

PLATFORM_FAILURES = (
    "NodeLost",
    "NodeDrained",
    "AgentRestarted",
    "AgentStopped",
    "AgentError",
    "StartError",
    "SandboxUnavailable",
)
BY_DESIGN = ("JobPreempted", "SpotPriceExceeded", "SpotAveragePriceExceeded", "SpotStockShortage")
VICTIMS = ("worker", "beat", "agent", "web")
MORE_VICTIMS = ("redis", "shim")  # the embedded Redis (when no REDIS_URL), a pod's shim
KINDS = ("quota", "distributed", "borrower", "only-idle", "public", "spot", "cpu", "fails")
TERMINAL = ("Succeeded", "Failed", "Stopped")
WAITING = ("Queuing", "Bidding")


# --- in the demo ---------------------------------------------------------------------------


def submit_workload(count: int, seed: int) -> dict[str, str]:
    """In the demo: `count` jobs cycling through KINDS, each sleeping 3–20 s; returns
    {job id: kind}."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from apps.jobs.services import job_submit
    from apps.jobs.specs import JobSpec, RoleSpec
    from apps.workspaces.models import Workspace

    rng = random.Random(seed)
    users = get_user_model().objects
    teams = {
        "team-a": (Workspace.objects.get(name="team-a"), users.get(username="alice")),
        "team-b": (Workspace.objects.get(name="team-b"), users.get(username="charlie")),
    }
    made = {}
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        command = f"echo {kind} {i}; sleep {rng.randint(3, 20)}"
        team = "team-a" if i % 2 else "team-b"
        role = RoleSpec(pod_count=1, cpu=4000, memory=16384, gpu=1)
        spec = JobSpec(
            display_name=f"{kind}-{i}",
            user_command=command,
            quota=team,
            enable_aimaster=rng.random() < 0.5,
            roles=[role],
        )
        if kind == "distributed":
            spec.roles = [
                RoleSpec(role_type="Master", cpu=4000, memory=16384, gpu=1),
                RoleSpec(role_type="Worker", pod_count=2, cpu=4000, memory=16384, gpu=1),
            ]
        elif kind in ("borrower", "only-idle"):
            spec.idle_mode = "acceptable" if kind == "borrower" else "only_idle"
            spec.enable_aimaster = True
            role.gpu = 8 if kind == "borrower" else 4
        elif kind in ("public", "spot"):
            spec.quota, spec.resource_source, spec.resource_type = "", kind, "ECS"
            spec.roles = [
                RoleSpec(
                    instance_type="ecs.g7.xlarge",
                    spot_discount_limit=Decimal("0.9") if kind == "spot" else None,
                )
            ]
            spec.enable_aimaster = kind == "spot" or spec.enable_aimaster
        elif kind == "cpu":
            role.gpu = 0
        elif kind == "fails":
            spec.user_command, spec.enable_aimaster = f"echo {kind} {i}; sleep 2; exit 3", False
        workspace, user = teams[team]
        made[job_submit(workspace=workspace, user=user, spec=spec).job_id] = kind
    return made


def sample() -> dict:
    """In the demo: what is wrong right now — nodes over capacity, quotas over their min
    (in-quota use, with every ancestor's), public instance types over their stock — and the
    pods shown Running whose process is not alive."""
    from collections import defaultdict

    from apps.cluster.models import InstanceType, Node, Quota
    from apps.jobs.models import Pod, pod_instance_type

    held = Pod.objects.filter(
        process__state__in=("queued", "starting", "running")
    ) | Pod.objects.filter(status__in=("Pending", "Running"))
    rows = (
        held.distinct()
        .annotate(type_id=pod_instance_type())
        .values_list(
            "node_id",
            "in_quota",
            "job__quota_id",
            "type_id",
            "role__cpu",
            "role__memory",
            "role__gpu",
        )
    )
    on_node, in_quota, public = (
        defaultdict(lambda: [0, 0, 0]),
        defaultdict(lambda: [0, 0, 0]),
        defaultdict(int),
    )
    parents = dict(Quota.objects.values_list("id", "parent_id"))
    for node_id, quota_ok, quota_id, type_id, cpu, memory, gpu in rows:
        if node_id is None:
            public[type_id] += 1
            continue
        for use in [on_node[node_id]] + (
            [] if not quota_ok else [in_quota[q] for q in _chain(quota_id, parents)]
        ):
            use[0], use[1], use[2] = use[0] + cpu, use[1] + memory, use[2] + gpu
    problems = []
    for node in Node.objects.filter(pk__in=list(on_node)):
        if not _fits(on_node[node.pk], (node.cpu, node.memory, node.gpu)):
            problems.append(f"node {node.name} over capacity: {on_node[node.pk]}")
    for quota in Quota.objects.filter(pk__in=list(in_quota)):
        if not _fits(in_quota[quota.pk], (quota.min_cpu, quota.min_memory, quota.min_gpu)):
            problems.append(f"quota {quota.name} in-quota use over its min: {in_quota[quota.pk]}")
    for kind in InstanceType.objects.filter(pk__in=list(public)):
        if public[kind.pk] > kind.public_capacity:
            problems.append(
                f"{kind.name}: {public[kind.pk]} public instances of {kind.public_capacity}"
            )
    problems += _attempt_problems()
    # ended (preempted, stopped, its node lost…) while its process still runs: the process
    # still holds its place (counted above), and its agent must stop it within the grace
    ending = list(
        Pod.objects.filter(
            status__in=("Succeeded", "Failed", "Stopped", "Preempted"), process__state="running"
        ).values_list("pod_id", flat=True)
    )
    stale = [
        pod_id
        for pod_id, pid in Pod.objects.filter(
            status="Running", process__state="running"
        ).values_list("pod_id", "process__pid")
        if not process_alive(pid)
    ]
    return {"t": time.time(), "problems": problems, "stale": stale, "ending": ending}


def _attempt_problems() -> list[str]:
    """In the demo: pods shown Running that have an end time, and slots (job, role, index)
    with two live attempts at once."""
    from collections import Counter

    from apps.jobs.models import Pod

    problems = [
        f"pod {pod_id} is {status} with process {state} but ended at {finished}"
        for pod_id, status, state, finished in Pod.objects.filter(
            status="Running", finished_at__isnull=False
        ).values_list("pod_id", "status", "process__state", "finished_at")
    ]
    live = Counter(
        Pod.objects.filter(status__in=("Pending", "Running")).values_list(
            "job__job_id", "role_id", "index"
        )
    )
    problems += [f"{slot}: {n} live attempts" for slot, n in live.items() if n > 1]
    return problems


def duplicate_events(job_ids: list[str]) -> list[str]:
    """In the demo: events that must happen once and were recorded twice — a pod started
    twice, a job submitted, failed or stopped twice — and any two events alike in job, pod,
    kind, message and moment."""
    from collections import Counter

    from apps.jobs.models import JobEvent

    events = JobEvent.objects.filter(job__job_id__in=job_ids)
    once = Counter(
        (job, pod if kind.startswith("Pod") else None, kind)
        for job, pod, kind in events.filter(
            kind__in=("Submitted", "PodStarted", "Failed", "Stopped")
        ).values_list("job__job_id", "pod__pod_id", "kind")
    )
    alike = Counter(events.values_list("job__job_id", "pod__pod_id", "kind", "message", "at"))
    return [f"event {key} recorded {n} times" for key, n in once.items() if n > 1] + [
        f"event {key[:3]} at {key[4]} recorded {n} times" for key, n in alike.items() if n > 1
    ]


def _chain(quota_id: int | None, parents: dict) -> list[int]:
    chain = []
    while quota_id is not None:
        chain.append(quota_id)
        quota_id = parents.get(quota_id)
    return chain


def _fits(used, capacity) -> bool:
    return all(u <= c for u, c in zip(used, capacity, strict=True))


def sample_loop(out: str, stop: str, every: float = 2.0) -> None:
    """In the demo: `sample()` every `every` seconds into the JSON-lines file `out`, until
    the file `stop` exists."""
    from django.db import connection

    with open(out, "a") as lines:
        while not os.path.exists(stop):
            try:
                lines.write(json.dumps(sample()) + "\n")
                lines.flush()
            except Exception as exc:  # the database may be busy while processes die
                lines.write(json.dumps({"t": time.time(), "error": repr(exc)}) + "\n")
                connection.close()
            time.sleep(every)


def settled(kinds: dict[str, str]) -> dict:
    """In the demo: how many of the jobs are not settled (terminal, or waiting with a
    reason), with a few of them named, and every job's status (a waiting job has settled
    only if it still waits a few ticks later: see `run`)."""
    from apps.jobs.models import Job

    rows = list(
        Job.objects.filter(job_id__in=list(kinds)).values_list("job_id", "status", "pending_reason")
    )
    open_jobs = [
        (job_id, status, reason)
        for job_id, status, reason in rows
        if status not in TERMINAL and not (status in WAITING and reason)
    ]
    return {
        "open": len(open_jobs),
        "some": open_jobs[:5],
        "statuses": sorted(f"{job_id}:{status}" for job_id, status, _ in rows),
    }


def jobs_named(prefix: str) -> dict:
    """In the demo: {display name: [job ids]} of the jobs whose name starts with `prefix`."""
    from apps.jobs.models import Job

    found: dict[str, list[str]] = {}
    for name, job_id in Job.objects.filter(display_name__startswith=prefix).values_list(
        "display_name", "job_id"
    ):
        found.setdefault(name, []).append(job_id)
    return found


def drain_busiest() -> dict:
    """In the demo: drain (as the admin's Drain action does) the Ready node with the most
    live pods; its name and how many jobs were moved."""
    from django.db.models import Count, Q
    from django.utils import timezone

    from apps.agent.services import nodes_drain
    from apps.cluster.models import Node

    node = (
        Node.objects.filter(status=Node.Status.READY)
        .annotate(live=Count("pods", filter=Q(pods__status__in=("Pending", "Running"))))
        .order_by("-live", "name")
        .first()
    )
    if node is None:
        return {"node": None, "moved": 0}
    print(json.dumps({"node": node.name, "moved": None}), flush=True)
    return {"node": node.name, "moved": nodes_drain(nodes=[node], now=timezone.now())}


def nodes_status() -> dict:
    """In the demo: {node name: status}."""
    from apps.cluster.models import Node

    return dict(Node.objects.values_list("name", "status"))


def final_check(kinds: dict[str, str]) -> dict:
    """In the demo, once everything settled: the invariants on the jobs, the bills and the
    processes (see the module docstring)."""
    from django.utils import timezone

    from apps.billing.models import BillLine
    from apps.billing.services import earlier_end, slot_runs
    from apps.core import pricing
    from apps.jobs.models import Job, Pod

    problems, platform_failed, statuses = [], [], {}
    for job in Job.objects.filter(job_id__in=list(kinds)):
        statuses[job.status] = statuses.get(job.status, 0) + 1
        kind = kinds[job.job_id]
        if job.status not in TERMINAL and not (job.status in WAITING and job.pending_reason):
            problems.append(f"{job.job_id} ({kind}) is {job.status} with no reason")
        if job.status == "Failed":
            own = (
                kind == "fails"
                and job.reason_code == "PodFailed"
                and "code 3" in job.reason_message
            )
            if job.reason_code in PLATFORM_FAILURES or not (own or job.reason_code in BY_DESIGN):
                platform_failed.append(
                    f"{job.job_id} ({kind}): {job.reason_code} {job.reason_message[:160]}"
                )
        elif kind == "fails" and job.status in TERMINAL:
            problems.append(f"{job.job_id} (fails) ended {job.status}, not Failed")
    billed: dict[int, set[int]] = {}
    for pod_pk, minute in BillLine.objects.filter(job__job_id__in=list(kinds)).values_list(
        "pod_id", "minute"
    ):
        billed.setdefault(pod_pk, set()).add(minute)
    metered = Pod.objects.filter(
        job__job_id__in=list(kinds),
        meter__closed=True,
        started_at__isnull=False,
        finished_at__isnull=False,
    )
    runs = slot_runs(Pod.objects.filter(job__job_id__in=list(kinds)), now=timezone.now())
    for pk, pod_id, job, role, index, attempt, started, finished in metered.values_list(
        "pk", "pod_id", "job_id", "role_id", "index", "attempt", "started_at", "finished_at"
    ):
        ran = set(
            pricing.bill_minutes(
                started.timestamp(),
                finished.timestamp(),
                already_billed_until=None,
                earlier_end=earlier_end(runs, (job, role, index), attempt),
            )
        )
        if billed.get(pk, set()) != ran:
            problems.append(
                f"pod {pod_id}: billed minutes {sorted(billed.get(pk, ()))} but "
                f"it ran in {sorted(ran)}"
            )
    problems += duplicate_events(list(kinds)) + _attempt_problems()
    live = Pod.objects.filter(status__in=("Pending", "Running")).count()
    orphans = (
        _orphans(Path(settings.AGENT_STATE_DIR), Path(settings.POD_WORK_ROOT)) if live == 0 else []
    )
    problems += [f"orphan process {o}" for o in orphans]
    return {
        "problems": problems,
        "platform_failed": platform_failed,
        "statuses": statuses,
        "metered_pods": metered.count(),
    }


def _orphans(state_dir: Path, work_root: Path) -> list[str]:
    """This installation's shims, and processes of a pod's uid working under its pod work
    root, that still run (other installations on the host are not ours to judge)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not process_alive(int(entry)):
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            uid = int(Path(f"/proc/{entry}/status").read_text().split("Uid:")[1].split()[0])
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except (OSError, IndexError, ValueError):
            continue
        shim = b"shim.py" in cmdline and str(state_dir).encode() in cmdline
        pod = uid >= settings.POD_UID_BASE and Path(cwd).is_relative_to(work_root)
        if shim or pod:
            found.append(f"pid {entry} uid {uid}: {cmdline[:120].decode(errors='replace')}")
    return found


# --- the harness ---------------------------------------------------------------------------


@dataclass
class Report:
    jobs: int = 0
    kills: dict[str, int] = field(default_factory=dict)
    recovery: list[float] = field(default_factory=list)  # seconds from a kill to its return
    settle_seconds: float = 0.0  # from the last kill until every job settled
    max_stale_seconds: float = 0.0  # the longest a pod showed Running with no process
    max_ending_seconds: float = 0.0  # the longest a pod showed ended with its process running
    problems: list[str] = field(default_factory=list)
    platform_failed: list[str] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    metered_pods: int = 0
    freezes: dict[str, int] = field(default_factory=dict)
    sdk_answered: int = 0  # CreateJob calls answered with a job id
    sdk_retried: int = 0  # calls that got no answer (the web died) and were sent again
    sdk_duplicates: int = 0  # jobs a retry made twice (the first answer was lost)
    console_answered: int = 0  # console submits answered with the job's page
    console_retried: int = 0
    console_duplicates: int = 0
    admin_kills: dict[str, int] = field(default_factory=dict)

    def figures(self) -> str:
        recovery = sorted(self.recovery) or [0.0]
        p99 = recovery[min(len(recovery) - 1, round(0.99 * (len(recovery) - 1)))]
        kills = ", ".join(f"{name} ×{n}" for name, n in sorted(self.kills.items()))
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        freezes = ", ".join(f"{name} ×{n}" for name, n in sorted(self.freezes.items()))
        admin = ", ".join(f"{name} ×{n}" for name, n in sorted(self.admin_kills.items())) or "-"
        return "\n".join(
            [
                f"jobs: {self.jobs} ({statuses})",
                f"kills: {sum(self.kills.values())} ({kills})",
                f"invariant violations: {len(self.problems)}",
                f"jobs failed by the platform: {len(self.platform_failed)}",
                f"recovery after a kill: p50 {statistics.median(recovery):.1f} s, p99 {p99:.1f} s",
                f"settled {self.settle_seconds:.0f} s after the last kill; longest Running without "
                f"a process: {self.max_stale_seconds:.1f} s; {self.samples} samples; "
                f"{self.metered_pods} billed pods checked; longest ended with its process "
                f"running: {self.max_ending_seconds:.1f} s",
                f"frozen (SIGSTOP): {sum(self.freezes.values())} ({freezes})",
                f"SDK CreateJob while the web died: {self.sdk_answered} answered, "
                f"{self.sdk_retried} sent again, {self.sdk_duplicates} duplicates made by a retry",
                f"console submits while the web died: {self.console_answered} answered, "
                f"{self.console_retried} sent again, {self.console_duplicates} duplicates",
                f"killed part-way: {admin}",
            ]
        )


def _flush_redis(url: str) -> None:
    """Empty the Redis database the round uses (its own number: a stale lock or queued
    message of an earlier round must not count in this one)."""
    import redis

    redis.Redis.from_url(url).flushdb()


def _create_database(server: str, name: str | None = None) -> str:
    import psycopg

    name = name or f"paiweb_faults_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(
    *,
    jobs: int = 120,
    kills: int = 12,
    window: float = 75.0,
    settle: float = 300.0,
    seed: int = 1,
    server: str | None = "postgresql://postgres@127.0.0.1:5432",
    database: str | None = None,
    redis_url: str | None = None,
    victims: tuple[str, ...] = VICTIMS,
    freeze: float = 0.0,
    sdk: bool = False,
    admin: int = 0,
    env: dict[str, str] | None = None,
    tell=print,
) -> Report:
    """One round: a demo on a fresh database, `jobs` jobs, `kills` SIGKILLs spread over
    `window` seconds (every victim at least once when kills ≥ len(victims)), then up to
    `settle` seconds for every job to settle, then the checks. The database is dropped
    after.

    `server` None: the embedded defaults (SQLite in the demo's directory); else a
    PostgreSQL server, on the database `database` (created, and dropped after) or a fresh
    one. `redis_url`: a real Redis (else the embedded one). `freeze`: the share of the
    blows that are a SIGSTOP of 2–20 s instead of a SIGKILL. `sdk`: jobs submitted through
    the SDK and the console all along the kill window. `admin`: how many times
    `apply_cluster` and an admin's drain are each killed part-way. `env`: more of the
    demo's environment (its ports…)."""
    from apps.ops.testing import DemoProcess

    rng, report = random.Random(seed), Report(jobs=jobs)
    name = (database or _create_database(server)) if server else None
    if server and database:
        _drop_database(server, database)
        _create_database(server, database)
    demo = None
    try:
        demo_env = {"AGENT_RECONCILE_SECONDS": "2", "SCHEDULER_MIN_RUN_SECONDS": "0"}
        if server:
            demo_env["DATABASE_URL"] = f"{server}/{name}"
        if redis_url:
            _flush_redis(redis_url)
            demo_env["REDIS_URL"] = redis_url
        demo_env.update(env or {})
        demo = DemoProcess(backend="agent", env=demo_env)
        if "PORT" in demo_env:
            demo.port = int(demo_env["PORT"])
        demo.wait_for(r"paiweb demo is running")
        kinds = demo.python(
            "import json; from apps.ops.faults import submit_workload; "
            f"print(json.dumps(submit_workload({jobs}, {seed})))"
        )
        tell(f"submitted {len(kinds)} jobs; killing for {window:.0f} s")
        samples, stop = demo.var / "samples.jsonl", demo.var / "samples.stop"
        sampler = threading.Thread(
            target=demo.python,
            daemon=True,
            args=(
                f"from apps.ops.faults import sample_loop; sample_loop({str(samples)!r}, "
                f"{str(stop)!r}); print('{{}}')",
            ),
            kwargs={"timeout": None},
        )
        sampler.start()
        stop_submits = threading.Event()
        answered: dict[str, str] = {}
        submitters = [
            threading.Thread(
                target=submit, args=(demo, stop_submits, answered, report), daemon=True
            )
            for submit in ((_sdk_submit, _console_submit) if sdk else ())
        ]
        for submitter in submitters:
            submitter.start()
        down = _kill_at_random(
            demo,
            kills=kills,
            window=window,
            rng=rng,
            report=report,
            victims=victims,
            freeze=freeze,
        )
        stop_submits.set()  # the submits go on while processes die, not after
        for submitter in submitters:
            submitter.join(timeout=120)
        for _ in range(admin):
            _kill_apply_cluster(demo, rng, report)
            _kill_drain(demo, rng, report, tell)
        last_kill = time.time()
        for prefix in ("sdk-", "console-") if sdk else ():
            made = demo.python(
                "import json; from apps.ops.faults import jobs_named; "
                f"print(json.dumps(jobs_named({prefix!r})))"
            )
            for job_ids in made.values():
                if prefix == "sdk-":
                    report.sdk_duplicates += len(job_ids) - 1
                else:
                    report.console_duplicates += len(job_ids) - 1
                for job_id in job_ids:
                    kinds[job_id] = prefix[:-1]
            lost = {j for j, n in answered.items() if n.startswith(prefix)} - {
                j for ids in made.values() for j in ids
            }
            report.problems += [f"{j} ({answered[j]}) was answered but is gone" for j in lost]
        report.settle_seconds = _settle(demo, kinds, since=last_kill, timeout=settle, report=report)
        if admin:
            left = demo.python(
                "import json; from apps.ops.faults import nodes_status; "
                "print(json.dumps(nodes_status()))"
            )
            report.problems += [
                f"node {n} is still {status} after the drains settled"
                for n, status in left.items()
                if status == "Draining"
            ]
        stop.touch()
        sampler.join(timeout=30)
        _read_samples(samples, down, report)
        checked = demo.python(
            "import json; from apps.ops.faults import final_check; "
            f"print(json.dumps(final_check({json.dumps(kinds)})))"
        )
        report.problems += checked["problems"]
        report.platform_failed = checked["platform_failed"]
        report.statuses = checked["statuses"]
        report.metered_pods = checked["metered_pods"]
        report.jobs = len(kinds)
    finally:
        if demo is not None:
            (demo.var / "samples.stop").touch()  # the sampler ends, whatever happened
            demo.stop()
            if demo.kill_shims():
                report.problems.append("pod shims were still running after the demo stopped")
        if server and name:
            _drop_database(server, name)
    return report


def _settle(
    demo,
    kinds: dict[str, str],
    *,
    since: float,
    timeout: float,
    report: Report,
    steady: float = 12.0,
) -> float:
    """Wait until every job is terminal or waiting with a reason, and has stayed exactly so
    for `steady` seconds (several scheduler ticks: a job waiting only because beat was just
    killed is not settled); seconds from `since` until then."""
    deadline, calm_since, seen = since + timeout, None, None
    while True:
        state = demo.python(
            "import json; from apps.ops.faults import settled; "
            f"print(json.dumps(settled({json.dumps(kinds)})))"
        )
        now = time.time()
        if state["open"] or state["statuses"] != seen:
            calm_since, seen = (None if state["open"] else now), state["statuses"]
        elif now - calm_since >= steady:
            return calm_since - since
        if now > deadline:
            report.problems.append(
                f"{state['open']} jobs not settled {timeout:.0f} s after "
                f"the last kill, e.g. {state['some']}"
            )
            return now - since
        time.sleep(2)


def _kill_at_random(
    demo,
    *,
    kills: int,
    window: float,
    rng: random.Random,
    report: Report,
    victims: tuple[str, ...] = VICTIMS,
    freeze: float = 0.0,
) -> list[tuple[float, float]]:
    """SIGKILL (or, `freeze` of the time, SIGSTOP for 2–20 s) a child of the demo or a
    pod's shim at random moments; returns when the agent was down or frozen."""
    from apps.agent.runner import running_shims

    order = list(victims) * (kills // len(victims)) + [
        rng.choice(victims) for _ in range(kills % len(victims))
    ]
    rng.shuffle(order)
    gaps = sorted(rng.uniform(0, window) for _ in order)
    began, down = time.time(), []
    for at, victim in zip(gaps, order, strict=True):
        time.sleep(max(began + at - time.time(), 0))
        if victim == "shim":
            shims = running_shims(demo.var / "agent")
            if shims:
                try:
                    os.kill(rng.choice(shims), signal.SIGKILL)
                    report.kills["shim"] = report.kills.get("shim", 0) + 1
                except ProcessLookupError:
                    pass
            continue
        pid = demo.pids().get(victim)
        if pid is None:
            continue
        if rng.random() < freeze:
            held = rng.uniform(2, 20)
            try:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(held)
            except ProcessLookupError:
                continue
            finally:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            report.freezes[victim] = report.freezes.get(victim, 0) + 1
            if victim == "agent":
                down.append((time.time() - held, time.time()))
            continue
        mark = len(demo.lines)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # it is restarting already: the next kill will find it
        killed = time.time()
        report.kills[victim] = report.kills.get(victim, 0) + 1
        back = _back(demo, victim, pid, after=mark)
        report.recovery.append(back - killed)
        if victim == "agent":
            down.append((killed, back))
    return down


def _back(demo, victim: str, old_pid: int, *, after: int, timeout: float = 90.0) -> float:
    """When the killed child works again: the agent once it serves its nodes, the web once
    /healthz answers, the others once started again."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pid = demo.pids().get(victim)
        if pid and pid != old_pid and _works(demo, victim, after=after):
            return time.time()
        time.sleep(0.2)
    raise AssertionError(
        f"{victim} did not come back within {timeout:.0f}s:\n" + "\n".join(demo.lines[-40:])
    )


def _works(demo, victim: str, *, after: int) -> bool:
    if victim == "agent":
        return any(" serves " in line for line in demo.lines[after:])
    if victim == "web":
        try:
            return demo.healthz() == 200
        except OSError:
            return False
    return True


def _read_samples(path: Path, agent_down: list[tuple[float, float]], report: Report) -> None:
    """Problems seen while processes died, and how long pods showed Running with no process
    (outside the agent's outages plus one heartbeat period, that is a violation)."""
    heartbeat = settings.AGENT_HEARTBEAT_INTERVAL
    first_seen: dict[str, float] = {}
    last_seen: dict[str, float] = {}
    try:
        samples = [json.loads(line) for line in path.read_text().splitlines()]
    except FileNotFoundError:
        samples = []
    began = samples[0]["t"] if samples else 0.0
    for data in samples:
        if "error" in data:
            continue
        report.samples += 1
        report.problems += [f"at +{data['t'] - began:.0f}s: {p}" for p in data["problems"]]
        for pod_id in data["stale"]:
            first_seen.setdefault(pod_id, data["t"])
            last_seen[pod_id] = data["t"]
    _read_ending(samples, agent_down, report)
    for pod_id, since in first_seen.items():
        stale = last_seen[pod_id] - since
        report.max_stale_seconds = max(report.max_stale_seconds, stale)
        excused = any(
            start - heartbeat <= last_seen[pod_id] and since <= end + heartbeat
            for start, end in agent_down
        )
        if stale > heartbeat + 2 and not excused:
            report.problems.append(
                f"pod {pod_id} showed Running with no process for {stale:.0f} s while its agent ran"
            )


def _read_ending(
    samples: list[dict], agent_down: list[tuple[float, float]], report: Report
) -> None:
    """How long pods showed ended while their process ran: outside the agent's outages,
    longer than a heartbeat period plus the default grace period is a violation."""
    allowed = settings.AGENT_HEARTBEAT_INTERVAL + 30 + 5
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for data in samples:
        for pod_id in data.get("ending", ()):
            first.setdefault(pod_id, data["t"])
            last[pod_id] = data["t"]
    for pod_id, since in first.items():
        seconds = last[pod_id] - since
        report.max_ending_seconds = max(report.max_ending_seconds, seconds)
        excused = any(start <= last[pod_id] and since <= end + allowed for start, end in agent_down)
        if seconds > allowed and not excused:
            report.problems.append(
                f"pod {pod_id} showed ended with its process running for {seconds:.0f} s "
                "while its agent ran"
            )


def _sdk_submit(demo, stop: threading.Event, answered: dict[str, str], report: Report) -> None:
    """CreateJob through the DLC SDK (alice's demo key, workspace 1) until `stop`, one
    small quota job at a time; a call that gets no answer (a connection refused or cut, a
    5xx) is sent again, at most 20 times, as a client with retries would. Fills `answered`
    with {job id: display name}."""
    from alibabacloud_pai_dlc20201203.client import Client
    from alibabacloud_pai_dlc20201203.models import CreateJobRequest
    from alibabacloud_tea_openapi.models import Config

    def client() -> Client:
        return Client(
            Config(
                access_key_id="LTAI5tDemoAlice000000001",
                access_key_secret="DemoSecretAlice000000000000001",
                endpoint=f"127.0.0.1:{demo.port}",
                protocol="http",
                region_id="cn-hangzhou",
                read_timeout=15000,
                connect_timeout=3000,
            )
        )

    i = 0
    while not stop.is_set():
        i += 1
        name = f"sdk-{i}"
        body = {
            "WorkspaceId": "1",
            "DisplayName": name,
            "JobType": "PyTorchJob",
            "ResourceId": "team-a",
            "JobSpecs": [
                {
                    "Type": "Worker",
                    "PodCount": 1,
                    "Image": "pytorch:2.3",
                    "ResourceConfig": {"CPU": "2", "Memory": "8Gi", "GPU": "1"},
                }
            ],
            "UserCommand": f"echo {name}; sleep 4",
        }
        for attempt in range(20):
            try:
                job_id = client().create_job(CreateJobRequest().from_map(body)).body.job_id
            except Exception as exc:  # the web died under the call: send it again
                status = getattr(exc, "status_code", None) or getattr(exc, "statusCode", None)
                if status is not None and int(status) < 500:
                    report.problems.append(f"CreateJob {name} refused: {exc!r}"[:300])
                    break
                report.sdk_retried += attempt == 0
                time.sleep(0.5)
                continue
            answered[job_id] = name
            report.sdk_answered += 1
            break
        time.sleep(1.0)


def _kill_apply_cluster(demo, rng: random.Random, report: Report) -> None:
    """`manage.py apply_cluster` of the demo's declaration, SIGKILLed at a random moment,
    then run again: it must apply, as if the first had never started."""
    import subprocess
    import sys

    from apps.ops.testing import BASE_DIR

    process = subprocess.Popen(
        [sys.executable, "manage.py", "apply_cluster", "examples/demo-cluster.toml"],
        cwd=BASE_DIR,
        env=demo.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(rng.uniform(0.8, 4.0))
    if process.poll() is None:
        process.kill()
        report.admin_kills["apply_cluster"] = report.admin_kills.get("apply_cluster", 0) + 1
    process.wait()
    demo.manage("apply_cluster", "examples/demo-cluster.toml")


def _kill_drain(demo, rng: random.Random, report: Report, tell) -> None:
    """Drain the busiest node as the admin's action does, in a process SIGKILLed part-way
    (once it has begun); the watchdog's sweep must finish the drain. The node is made Ready
    again once it is Cordoned, so the jobs have their capacity back."""
    import subprocess
    import sys

    from apps.ops.testing import BASE_DIR

    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "import json; from apps.ops.faults import drain_busiest; "
            "print(json.dumps(drain_busiest()))",
        ],
        cwd=BASE_DIR,
        env=demo.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    first = ""  # the node it drains, printed as the drain begins
    for line in process.stdout:
        if line.startswith("{"):
            first = line
            break
    time.sleep(rng.uniform(0.0, 0.5))
    killed = process.poll() is None
    if killed:
        process.kill()
        report.admin_kills["drain"] = report.admin_kills.get("drain", 0) + 1
    process.communicate()
    node = json.loads(first)["node"] if first.strip() else None
    if node is None:
        return
    deadline = time.time() + 90
    while time.time() < deadline:
        status = demo.python(
            "import json; from apps.ops.faults import nodes_status; "
            "print(json.dumps(nodes_status()))"
        )[node]
        if status == "Cordoned" or (killed and status == "Ready"):
            break  # drained, or killed before its first write (nothing to finish)
        time.sleep(2)
    else:
        report.problems.append(f"drain of {node} killed part-way: still {status} after 90 s")
    tell(f"drained {node} ({'killed part-way' if killed else 'whole'}): {status}")
    demo.python(
        "import json; from apps.cluster.models import Node; "
        f"print(json.dumps(Node.objects.filter(name={node!r}).update(status='Ready')))"
    )


def _console_submit(demo, stop: threading.Event, answered: dict[str, str], report: Report) -> None:
    """Submit the console's create form as alice (team-a) until `stop`, one small quota
    job at a time; a submit that gets no answer (the web died under it) is sent again, as
    a person reloading the page would. Fills `answered` with {job id: display name} of the
    submits answered with the job's page."""
    import re

    import requests

    base = f"http://127.0.0.1:{demo.port}"

    def signed_in() -> requests.Session:
        session = requests.Session()
        page = session.get(f"{base}/login/", timeout=10)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        session.post(
            f"{base}/login/",
            data={
                "username": "alice",
                "password": "alice-demo-pw",
                "csrfmiddlewaretoken": token[1] if token else "",
            },
            headers={"Referer": f"{base}/login/"},
            timeout=10,
        )
        return session

    session, i = None, 0
    while not stop.is_set():
        i += 1
        name = f"console-{i}"
        for attempt in range(20):
            try:
                session = session or signed_in()
                page = session.get(f"{base}/jobs/new/", timeout=10)
                token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
                drawn = re.search(r'name="form_workspace" value="([^"]*)"', page.text)
                if not token or not drawn:
                    raise OSError(f"no form: {page.status_code}")
                answer = session.post(
                    f"{base}/jobs/new/",
                    data={
                        "csrfmiddlewaretoken": token[1],
                        "form_workspace": drawn[1],
                        "display_name": name,
                        "job_type": "PyTorchJob",
                        "image": "registry.local/pytorch:2.3",
                        "user_command": f"echo {name}; sleep 4",
                        "envs": "",
                        "data_sources": "",
                        "priority": "1",
                        "success_policy": "AllWorkers",
                        "resource_type": "ECS",
                        "resource_source": "quota",
                        "quota": "team-a",
                        "idle_mode": "off",
                        "max_restarts": "3",
                        "execution_mode": "Sync",
                        "roles-0-role_type": "Worker",
                        "roles-0-pod_count": "1",
                        "roles-0-cpu_cores": "2",
                        "roles-0-memory_gib": "8",
                        "roles-0-gpus": "1",
                        "roles-0-restart_policy": "OnFailure",
                    },
                    headers={"Referer": f"{base}/jobs/new/"},
                    allow_redirects=False,
                    timeout=15,
                )
            except (OSError, requests.RequestException):
                report.console_retried += attempt == 0
                session = None
                time.sleep(0.5)
                continue
            if answer.status_code >= 500:
                report.console_retried += attempt == 0
                time.sleep(0.5)
                continue
            made = re.search(r"/jobs/([^/]+)/$", answer.headers.get("Location", ""))
            if answer.status_code != 302 or not made:
                report.problems.append(f"console submit {name}: {answer.status_code}")
                break
            answered[made[1]] = name
            report.console_answered += 1
            break
        time.sleep(1.0)
