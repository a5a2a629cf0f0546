"""The Bills page, a job's cost and the CSV export over a month of one busy workspace's bill
lines, on a real database.

    createdb -h 127.0.0.1 -U postgres paiweb_bench_bills
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/paiweb_bench_bills \\
        .venv/bin/python benchmarks/bills_pages.py [--days 30] [--pods 200]

The database is WIPED first (migrate + flush): never point it at real data. It builds one
workspace whose `--pods` pods (4 a job) each ran every minute of the last `--days` days,
billed minute by minute as `billing_accrue` bills them (200 pods for 30 days: 8.6 million
lines), then times what a reader of the bills waits for: the Bills page's days and its first
page of jobs, one job's cost box (its page and GetJob), one job's bill lines, and the first
rows of the CSV export. Goal: each under 0.5 s.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")
os.environ.setdefault("DEBUG", "true")  # a development run: no SECRET_KEY needed
os.environ["EXECUTION_BACKEND"] = "none"

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.core.paginator import Paginator  # noqa: E402
from django.db import connection  # noqa: E402

from apps.billing import selectors  # noqa: E402
from apps.billing.models import BillLine  # noqa: E402
from apps.billing.services import billing_accrue  # noqa: E402
from apps.cluster.models import InstanceType  # noqa: E402
from apps.jobs.models import Job, JobRole, JobStatus, Pod, PodStatus  # noqa: E402
from apps.workspaces.models import Membership, Workspace  # noqa: E402
from benchmarks.common import analyze, python_reference  # noqa: E402

PODS_PER_JOB = 4


def build(*, days: int, pods: int, now: datetime):
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-password")
    workspace = Workspace.objects.create(name="bench")
    Membership.objects.create(user=user, workspace=workspace, role=Membership.Role.OWNER)
    itype = InstanceType.objects.create(
        name="ecs.g7.xlarge",
        resource_type="ECS",
        cpu=4000,
        memory=16384,
        price_per_hour=Decimal("1.2"),
        public_capacity=1000,
    )
    started = now - timedelta(days=days)
    jobs = Job.objects.bulk_create(
        Job(
            workspace=workspace,
            user=user,
            display_name=f"job-{i}",
            user_command="true",
            resource_source="public",
            status=JobStatus.RUNNING,
            submitted_at=started,
            status_changed_at=started,
            started_at=started,
        )
        for i in range(pods // PODS_PER_JOB)
    )
    roles = JobRole.objects.bulk_create(
        JobRole(
            job=job,
            role_type="Worker",
            pod_count=PODS_PER_JOB,
            instance_type=itype,
            cpu=4000,
            memory=16384,
        )
        for job in jobs
    )
    Pod.objects.bulk_create(
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
    )
    # Every minute of every pod, as billing_accrue writes them (one INSERT … SELECT).
    first, last = int(started.timestamp()) // 60, int(now.timestamp()) // 60
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {BillLine._meta.db_table} (workspace_id, job_id, pod_id, minute, day, "
            "instance_type_id, price_per_hour, amount, pay_type) "
            "SELECT %s, p.job_id, p.id, m, date(to_timestamp(m * 60) AT TIME ZONE 'UTC'), "
            "%s, 1.2, 0.02, 'postpaid' FROM jobs_pod p, generate_series(%s, %s) m",
            [workspace.pk, itype.pk, first, last - 1],
        )
    return user, workspace, jobs[0]


def timed(label: str, work) -> None:
    start = time.perf_counter()
    result = work()
    print(f"{label:<44} {time.perf_counter() - start:7.3f} s   {result}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="time the pages on the database a run built (migrating it first), without wiping",
    )
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("benchmarks/bills_pages.py needs PostgreSQL (DATABASE_URL)")
    start = time.perf_counter()
    if args.keep:
        call_command("migrate", verbosity=0)
        print(
            f"database: {connection.settings_dict['NAME']}, migrated in "
            f"{time.perf_counter() - start:.1f} s"
        )
        user, workspace = get_user_model().objects.get(), Workspace.objects.get()
        job = Job.objects.order_by("pk").first()
    else:
        print(f"database: {connection.settings_dict['NAME']} — wiping it")
        now = datetime.now(UTC).replace(second=30, microsecond=0)
        user, workspace, job = build(days=args.days, pods=args.pods, now=now)
        billing_accrue(now=now)  # bills the current minute, as a live run would
    analyze()
    print(f"{BillLine.objects.count():,} bill lines ({time.perf_counter() - start:.1f} s)")
    print(f"machine: a 10-million-step Python loop takes {python_reference():.2f} s")
    scope = {"user": user, "workspace": workspace, "pay_type": ""}
    timed("Bills page: the days", lambda: len(selectors.workspace_daily_bills(**scope)))
    timed(
        "Bills page: first page of jobs",
        lambda: len(
            Paginator(selectors.job_daily_bills(**scope), settings.JOBS_PAGE_SIZE).get_page(1)
        ),
    )
    timed("a job's cost box (job page, GetJob)", lambda: selectors.job_usage(job=job).cost)
    timed("a job's bill lines, first page", lambda: selectors.job_bill_lines(job=job)[0])
    timed(
        "CSV export: the first 100 rows",
        lambda: len(list(itertools.islice(selectors.bill_export_rows(**scope), 101))) - 1,
    )


if __name__ == "__main__":
    main()
