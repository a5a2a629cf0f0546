"""Full scheduler tick on a real database: load the snapshot, plan, apply.

    createdb -h 127.0.0.1 -U postgres paiweb_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/paiweb_bench python benchmarks/scheduler_tick.py

It creates (or re-creates) a synthetic cluster in that database — 2,000 nodes × 8 GPUs, a
tree of 20 quotas, 10,000 pending jobs of 1–16 pods — then prints the time of the first
tick (which admits what fits), a second tick (the queue that is left), and an idle tick.
The database is wiped first: never point it at real data. SCHEDULER_PLACEMENT=fgd measures
FGD's placement (docs/operations.md, "Placement").
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")
os.environ.setdefault("DEBUG", "true")  # a development run: no SECRET_KEY needed
# Measure the scheduler, not the agents: placed pods count as running (no processes).
os.environ["EXECUTION_BACKEND"] = "none"

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from apps.cluster.models import Node, Quota, ResourcePool  # noqa: E402
from apps.jobs.models import Job, JobRole, JobStatus  # noqa: E402
from apps.scheduler.services import scheduler_snapshot, scheduler_tick  # noqa: E402
from apps.workspaces.models import Workspace  # noqa: E402

NODES, GPUS, QUOTAS, JOBS = 2000, 8, 20, 10_000


def build(rng: random.Random) -> None:
    call_command("migrate", verbosity=0)  # a fresh database has no tables yet
    call_command("flush", interactive=False, verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-password")
    ws = Workspace.objects.create(name="bench")
    pool = ResourcePool.objects.create(name="bench-pool", kind="dedicated", resource_type="ECS")
    Node.objects.bulk_create(
        Node(name=f"n{i:05d}", pool=pool, cpu=128_000, memory=1024 * 1024, gpu=GPUS)
        for i in range(NODES)
    )
    total = NODES * GPUS
    root = Quota.objects.create(
        name="root",
        pool=pool,
        resource_type="ECS",
        min_cpu=NODES * 128_000,
        min_memory=NODES * 1024 * 1024,
        min_gpu=total,
    )
    parents = [
        Quota.objects.create(
            name=f"dept-{d}",
            parent=root,
            pool=pool,
            resource_type="ECS",
            min_cpu=NODES * 128_000 // 4,
            min_memory=NODES * 1024 * 1024 // 4,
            min_gpu=total // 4,
        )
        for d in range(4)
    ]
    leaves = []
    for i in range(QUOTAS - 5):
        parent = parents[i % 4]
        leaves.append(
            Quota.objects.create(
                name=f"team-{i}",
                parent=parent,
                pool=pool,
                resource_type="ECS",
                min_cpu=parent.min_cpu // 4,
                min_memory=parent.min_memory // 4,
                min_gpu=parent.min_gpu // 4,
                queue_strategy=rng.choice(["StrictFIFO", "BestEffortFIFO"]),
            )
        )
    now = timezone.now()
    jobs = [
        Job(
            workspace=ws,
            user=user,
            display_name=f"job-{i}",
            user_command="true",
            resource_source="quota",
            quota=rng.choice(leaves),
            idle_mode=rng.choice(["off", "off", "acceptable", "only_idle"]),
            priority=rng.randint(1, 9),
            status=JobStatus.QUEUING,
            submitted_at=now,
            status_changed_at=now,
        )
        for i in range(JOBS)
    ]
    Job.objects.bulk_create(jobs, batch_size=2000)
    JobRole.objects.bulk_create(
        (
            JobRole(
                job=job,
                role_type="Worker",
                pod_count=rng.randint(1, 16),
                cpu=8000,
                memory=65536,
                gpu=rng.choice([1, 2, 4, 8]),
            )
            for job in jobs
        ),
        batch_size=2000,
    )


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    print(f"{label:<34} {elapsed * 1000:9.1f} ms   {result}")
    return result, elapsed


def main() -> None:
    print(
        f"database: {connection.vendor}; {NODES} nodes × {GPUS} GPUs, {QUOTAS} quotas, {JOBS} jobs"
    )
    rng = random.Random(7)
    start = time.perf_counter()
    build(rng)
    print(f"built in {time.perf_counter() - start:.1f} s")
    timed("snapshot load (10,000 pending)", lambda: len(scheduler_snapshot().pending))
    report, elapsed = timed(
        "first tick (admits what fits)", lambda: scheduler_tick(now=timezone.now())
    )
    print(f"{'admissions per second':<34} {report.admitted / elapsed:9.0f}")
    timed("second tick (the rest waits)", lambda: scheduler_tick(now=timezone.now()))
    with transaction.atomic():
        Job.objects.filter(status=JobStatus.QUEUING).update(status=JobStatus.STOPPED)
    timed("idle tick (nothing pending)", lambda: scheduler_tick(now=timezone.now()))
    reclaim_heavy(rng)


def reclaim_heavy(rng: random.Random) -> None:
    """Borrowers fill the pool, then owners arrive and take their guarantee back."""
    from django.conf import settings

    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    with transaction.atomic():
        Job.objects.filter(status=JobStatus.RUNNING).update(status=JobStatus.STOPPED)
        from apps.jobs.models import Pod

        Pod.objects.update(status="Stopped")
    ws, user = Workspace.objects.get(), get_user_model().objects.get()
    leaves = list(Quota.objects.filter(name__startswith="team-"))
    now = timezone.now()

    def add(count: int, idle: str, gpus: int) -> None:
        jobs = Job.objects.bulk_create(
            (
                Job(
                    workspace=ws,
                    user=user,
                    display_name=f"{idle}-{i}",
                    user_command="true",
                    resource_source="quota",
                    quota=rng.choice(leaves),
                    idle_mode=idle,
                    enable_aimaster=True,
                    status=JobStatus.QUEUING,
                    submitted_at=now,
                    status_changed_at=now,
                )
                for i in range(count)
            ),
            batch_size=2000,
        )
        JobRole.objects.bulk_create(
            (
                JobRole(job=job, role_type="Worker", pod_count=1, cpu=8000, memory=65536, gpu=gpus)
                for job in jobs
            ),
            batch_size=2000,
        )

    add(NODES * GPUS // 4, "only_idle", 4)  # two borrowers per node fill every GPU
    timed("borrowers fill the pool", lambda: scheduler_tick(now=timezone.now()))
    add(1000, "off", 8)
    timed("owners arrive: reclaim tick", lambda: scheduler_tick(now=timezone.now()))
    timed("next tick: owners placed", lambda: scheduler_tick(now=timezone.now()))


if __name__ == "__main__":
    main()
