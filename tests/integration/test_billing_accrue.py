"""Per-minute billing of pay-as-you-go and spot pods: idempotent, crash-safe, at the right
price; daily bills, the payType tag and the CSV rows."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal as D

import pytest
from django.utils import timezone

from apps.billing import services as billing_services
from apps.billing.models import BillLine, PodMeter
from apps.billing.selectors import (
    CSV_HEADER,
    bill_export_rows,
    job_cost,
    job_daily_bills,
    job_usage,
    workspace_daily_bills,
)
from apps.billing.services import billing_accrue
from apps.billing.tasks import billing_accrue_task
from apps.core.redis import singleton_lock
from apps.jobs.models import Job, JobStatus, Pod, PodStatus
from apps.jobs.services import job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from tests.integration.test_market_step import G7, NOW, at, replay_writer, step, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def replay(settings, tmp_path):
    return replay_writer(settings, tmp_path)


@pytest.fixture(autouse=True)
def _prices(replay):
    replay([(NOW - timedelta(hours=1), G7, "0.30"), (at(1, 30), G7, "0.42"), (at(3), G7, "0.60")])


def lines(job: Job) -> list[tuple[int, D, D]]:
    """(minute offset from NOW, price per hour, amount) of the job's bill lines."""
    base = int(NOW.timestamp()) // 60
    return [
        (m - base, p, a)
        for m, p, a in BillLine.objects.filter(job=job)
        .order_by("pod_id", "minute")
        .values_list("minute", "price_per_hour", "amount")
    ]


def test_it_bills_each_started_minute_once_however_often_it_runs(personas):
    job = submit(personas, discount="0.9")
    step(at(0))
    billing_accrue(now=at(1, 10))
    billing_accrue(now=at(1, 10))
    billing_accrue(now=at(1, 50))
    assert [m for m, _, _ in lines(job)] == [0, 1]
    billing_accrue(now=at(2, 0))
    assert [m for m, _, _ in lines(job)] == [0, 1]  # minute 2 starts at 12:02:00: nothing yet
    billing_accrue(now=at(2, 1))
    assert [m for m, _, _ in lines(job)] == [0, 1, 2]


def test_it_bills_spot_minutes_at_the_market_price_in_force_at_each_minute(personas):
    job = submit(personas, discount="0.9")  # ¥0.72/h: survives every price here
    for moment in (at(0), at(1, 30), at(3)):
        step(moment)
    billing_accrue(now=at(3, 59))
    assert lines(job) == [
        (0, D("0.3000"), D("0.005000")),
        (1, D("0.3000"), D("0.005000")),  # the rise at 12:01:30 counts from the next minute
        (2, D("0.4200"), D("0.007000")),
        (3, D("0.6000"), D("0.010000")),
    ]
    assert job_cost(job=job) == D("0.027000")


def test_it_charges_a_pods_first_partial_minute_at_the_price_it_started_at(personas, replay):
    replay([(NOW, G7, "0.50"), (at(0, 30), G7, "0.30")])
    job = submit(personas, discount="0.4")  # ¥0.32/h
    step(at(0))
    step(at(0, 30))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    billing_accrue(now=at(1, 5))
    assert lines(job) == [(0, D("0.3000"), D("0.005000")), (1, D("0.3000"), D("0.005000"))]


def test_it_bills_pay_as_you_go_at_the_original_price(personas):
    job = submit(personas, source="public", pods=3)
    step(at(0))
    billing_accrue(now=at(1, 30))
    assert len(lines(job)) == 6
    assert {(p, a) for _, p, a in lines(job)} == {(D("0.8000"), D("0.013333"))}
    assert set(BillLine.objects.filter(job=job).values_list("pay_type", flat=True)) == {"postpaid"}
    assert job_cost(job=job) == D("0.079998")


def test_it_bills_no_lines_for_prepaid_quota_jobs_and_shows_their_gpu_hours(personas, cluster):
    spec = JobSpec(
        display_name="quota",
        user_command="python train.py",
        quota="team-a",
        roles=[RoleSpec(pod_count=2, cpu=4000, memory=16384, gpu=2)],
    )
    job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec, now=NOW)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, started_at=NOW)
    role = job.roles.get()
    for i in range(2):  # as the scheduler places them
        Pod.objects.create(
            job=job,
            role=role,
            index=i,
            pod_id=f"q-{i}",
            node=cluster["nodes"][0],
            in_quota=True,
            status=PodStatus.RUNNING,
            started_at=NOW,
        )
    billing_accrue(now=at(90))
    assert not BillLine.objects.exists() and not PodMeter.objects.exists()
    job.refresh_from_db()
    usage = job_usage(job=job, now=NOW + timedelta(hours=1))
    assert usage.prepaid and usage.cost == 0
    assert usage.gpu_hours == pytest.approx(4.0)  # 2 pods × 2 GPUs × 1 h


def test_it_bills_a_stopped_pod_through_the_minute_it_stopped_and_closes_its_meter(personas):
    job = submit(personas, discount="0.9")
    step(at(0))
    job_stop(job=job, by=personas["alice"], now=at(2, 20))
    billing_accrue(now=at(5))
    assert [m for m, _, _ in lines(job)] == [0, 1, 2]
    assert PodMeter.objects.get(pod__job=job).closed
    billing_accrue(now=at(9))
    assert len(lines(job)) == 3


def test_it_bills_a_reclaimed_spot_pod_until_the_reclaim(personas, replay):
    replay([(NOW, G7, "0.30"), (at(2, 10), G7, "0.70")])
    job = submit(personas, discount="0.8")
    step(at(0))
    step(at(2, 10))
    billing_accrue(now=at(6))
    assert [(m, p) for m, p, _ in lines(job)] == [
        (0, D("0.3000")),
        (1, D("0.3000")),
        (2, D("0.3000")),
    ]


def test_it_bills_a_slots_minute_once_when_its_pod_is_replaced_within_it(
    personas, replay, settings
):
    """Reclaimed at 12:02:10 and started again at 12:02:40: the job's worker 0 ran in minute
    2 as two pods, one after the other, and is one instance to its user: minute 2 is billed
    once, to the pod that ran in it first, however the billing runs fall."""
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0
    replay([(NOW, G7, "0.30"), (at(2, 10), G7, "0.70"), (at(2, 40), G7, "0.30")])
    job = submit(personas, discount="0.8", aimaster=True)
    step(at(0))
    billing_accrue(now=at(2, 5))
    step(at(2, 10))
    step(at(2, 40))
    billing_accrue(now=at(2, 50))
    billing_accrue(now=at(5, 10))
    first, second = job.pods.order_by("attempt")
    assert (first.finished_at, second.started_at) == (at(2, 10), at(2, 40))
    billed = {pod.attempt: sorted(m for m, _, _ in lines_of(pod)) for pod in (first, second)}
    assert billed == {0: [0, 1, 2], 1: [3, 4, 5]}


def lines_of(pod: Pod) -> list[tuple[int, D, D]]:
    base = int(NOW.timestamp()) // 60
    return [
        (m - base, p, a)
        for m, p, a in BillLine.objects.filter(pod=pod).values_list(
            "minute", "price_per_hour", "amount"
        )
    ]


def test_it_writes_nothing_when_a_run_fails_halfway(personas, monkeypatch):
    job = submit(personas, discount="0.9", pods=2)
    step(at(0))

    def crash_after_the_lines(*args, **kwargs):  # the meters would move next
        assert BillLine.objects.filter(job=job).count() == 8  # lines are in, uncommitted
        raise RuntimeError("worker died")

    monkeypatch.setattr(billing_services, "pks_update", crash_after_the_lines)
    with pytest.raises(RuntimeError):
        billing_accrue(now=at(3, 30))
    monkeypatch.undo()
    assert not BillLine.objects.exists()
    assert not PodMeter.objects.filter(billed_until__isnull=False).exists()
    billing_accrue(now=at(3, 30))
    assert len(lines(job)) == 8


def test_it_meters_a_running_pod_nobody_opened_a_meter_for(personas):
    job = submit(personas, source="public")
    job.status = JobStatus.RUNNING
    job.save(update_fields=["status"])
    role = job.roles.get()
    Pod.objects.create(
        job=job, role=role, index=0, pod_id="orphan-0", status=PodStatus.RUNNING, started_at=at(0)
    )
    billing_accrue(now=at(0, 30))
    assert [m for m, _, _ in lines(job)] == [0]


def test_its_task_bills_under_the_lock(personas):
    started = timezone.now() - timedelta(seconds=30)  # the task reads the real clock
    job = submit(personas, source="public", now=started)
    step(started)
    with singleton_lock("billing-accrue", timeout=10):
        billing_accrue_task()
    assert not BillLine.objects.exists()
    billing_accrue_task()
    assert BillLine.objects.filter(job=job).exists()


# --- daily bills ---------------------------------------------------------------------------------

MIDNIGHT = datetime(2026, 3, 3, 0, 0, tzinfo=UTC)


def test_it_splits_daily_bills_at_utc_midnight_and_marks_complete_days(personas, replay):
    replay([(MIDNIGHT - timedelta(hours=1), G7, "0.30")])
    spot = submit(personas, discount="0.9", now=MIDNIGHT - timedelta(minutes=2), name="spot")
    payg = submit(personas, source="public", now=MIDNIGHT - timedelta(minutes=2), name="payg")
    step(MIDNIGHT - timedelta(minutes=2))
    billing_accrue(now=MIDNIGHT + timedelta(minutes=1, seconds=30))
    alice, ws = personas["alice"], personas["ws_a"]
    days = workspace_daily_bills(user=alice, workspace=ws, now=MIDNIGHT + timedelta(minutes=2))
    assert [(d.day, d.complete, d.minutes) for d in days] == [
        (date(2026, 3, 3), False, 4),
        (date(2026, 3, 2), True, 4),
    ]
    assert days[1].spot == D("0.010000") and days[1].postpaid == D("0.026666")
    spot_days = workspace_daily_bills(user=alice, workspace=ws, pay_type="spot")
    assert all(d.postpaid == 0 for d in spot_days) and sum(d.spot for d in spot_days) == D("0.02")
    per_job = list(job_daily_bills(user=alice, workspace=ws, pay_type="postpaid"))
    assert {(r["job_id"], r["instance_minutes"]) for r in per_job} == {(payg.job_id, 2)}
    assert len(per_job) == 2  # one row per day
    assert spot.job_id not in {r["job_id"] for r in per_job}


def test_it_exports_one_csv_row_per_pod_and_day(personas):
    job = submit(personas, discount="0.9", pods=2, name="train")
    step(at(0))
    billing_accrue(now=at(2, 30))
    rows = list(bill_export_rows(user=personas["alice"], workspace=personas["ws_a"]))
    assert rows[0] == CSV_HEADER
    assert rows[1:] == [
        (
            "2026-03-02",
            "team-a",
            job.job_id,
            "train",
            f"{job.job_id}-worker-{i}-a0",
            G7,
            "spot",
            3,
            "0.015000",
        )
        for i in range(2)
    ]


def test_it_shows_bills_only_to_members_of_the_workspace(personas):
    submit(personas, discount="0.9")
    step(at(0))
    billing_accrue(now=at(1, 30))
    charlie, ws_a = personas["charlie"], personas["ws_a"]
    assert workspace_daily_bills(user=charlie, workspace=ws_a) == []
    assert list(bill_export_rows(user=charlie, workspace=ws_a)) == [CSV_HEADER]
    assert workspace_daily_bills(user=personas["bob"], workspace=ws_a) != []
