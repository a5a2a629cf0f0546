"""One billing run over 10,000 running pods on a real database.

    createdb -h 127.0.0.1 -U postgres paiweb_bench_billing
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/paiweb_bench_billing \
        .venv/bin/python benchmarks/billing_run.py

The database is WIPED first (migrate + flush): never point it at real data. It builds 50
instance types with an hour of 10-second price history, 2,500 jobs (70% spot, 30%
pay-as-you-go) of 4 running pods each, every pod billed up to the previous minute, then
times `billing_accrue` for the new minute (10,000 lines), a repeated run (nothing new), and
the minute after (10,000 lines more, each added to its pod's day).
Goal: ≤ 1 s.
"""

from __future__ import annotations

import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")
os.environ.setdefault("DEBUG", "true")  # a development run: no SECRET_KEY needed
# Measure the market and billing, not the agents: no pod processes are started.
os.environ["EXECUTION_BACKEND"] = "none"

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from apps.billing.models import BillLine, PodMeter  # noqa: E402
from apps.billing.services import billing_accrue  # noqa: E402
from apps.cluster.models import InstanceType  # noqa: E402
from apps.jobs.models import Job, JobRole, JobStatus, Pod, PodStatus  # noqa: E402
from apps.market.models import PricePoint  # noqa: E402
from apps.workspaces.models import Workspace  # noqa: E402
from benchmarks.common import analyze, python_reference  # noqa: E402

TYPES, JOBS, PODS_PER_JOB = 50, 2_500, 4


def build(rng: random.Random, now: datetime) -> None:
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-password")
    workspaces = [Workspace.objects.create(name=f"bench-{i}") for i in range(5)]
    types = InstanceType.objects.bulk_create(
        InstanceType(
            name=f"ecs.b{i:03d}.xlarge",
            resource_type="ECS",
            cpu=4000,
            memory=16384,
            price_per_hour=Decimal(rng.randint(5_000, 400_000)) / 10_000,
            public_capacity=1000,
        )
        for i in range(TYPES)
    )
    PricePoint.objects.bulk_create(
        (
            PricePoint(
                instance_type=t,
                at=now - timedelta(seconds=10 * k),
                price_per_hour=(t.price_per_hour * Decimal(rng.randint(10, 100)) / 100).quantize(
                    Decimal("0.0001")
                ),
            )
            for t in types
            for k in range(360)
        ),
        batch_size=5000,
    )
    started = now - timedelta(minutes=30)
    jobs = Job.objects.bulk_create(
        (
            Job(
                workspace=rng.choice(workspaces),
                user=user,
                display_name=f"job-{i}",
                user_command="true",
                resource_source="spot" if rng.random() < 0.7 else "public",
                status=JobStatus.RUNNING,
                submitted_at=started,
                status_changed_at=started,
                started_at=started,
            )
            for i in range(JOBS)
        ),
        batch_size=5000,
    )
    roles = JobRole.objects.bulk_create(
        (
            JobRole(
                job=job,
                role_type="Worker",
                pod_count=PODS_PER_JOB,
                instance_type=rng.choice(types),
                cpu=4000,
                memory=16384,
                spot_discount_limit=Decimal("0.9") if job.resource_source == "spot" else None,
            )
            for job in jobs
        ),
        batch_size=5000,
    )
    pods = Pod.objects.bulk_create(
        (
            Pod(
                job=role.job,
                role=role,
                index=i,
                pod_id=f"{role.job.job_id}-worker-{i}-a0",
                status=PodStatus.RUNNING,
                started_at=started,
            )
            for role in roles
            for i in range(PODS_PER_JOB)
        ),
        batch_size=5000,
    )
    billed_until = int(now.timestamp()) // 60  # every minute before this one is billed
    PodMeter.objects.bulk_create(
        (PodMeter(pod=pod, billed_until=billed_until) for pod in pods), batch_size=5000
    )


def main() -> None:
    if connection.vendor != "postgresql":
        print(f"note: running on {connection.vendor}; the goal is set for PostgreSQL")
    print(f"database: {connection.settings_dict['NAME']} — wiping it")
    now = datetime.now(UTC).replace(second=30, microsecond=0)
    start = time.perf_counter()
    build(random.Random(2026), now)
    analyze()
    elapsed = time.perf_counter() - start
    print(f"built {JOBS:,} jobs × {PODS_PER_JOB} running pods in {elapsed:.1f} s")
    print(f"machine: a 10-million-step Python loop takes {python_reference():.2f} s")
    for label, at in (
        ("billing run (one new minute)", now),
        ("repeated run (nothing new)", now),
        ("the next minute", now + timedelta(minutes=1)),
    ):
        start = time.perf_counter()
        report = billing_accrue(now=at)
        elapsed = time.perf_counter() - start
        print(
            f"{label:<30} {elapsed:6.3f} s   {report.pods:,} meters, {report.lines:,} lines, "
            f"¥{report.amount}"
        )
    print(f"bill lines in the database: {BillLine.objects.count():,}")


if __name__ == "__main__":
    main()
