"""End to end, driven by the replay trace in examples/spot-prices.csv: a spot job with
AIMaster bids, runs, is reclaimed when the price rises above its bid, waits, re-bids when
the price falls, runs again and finishes; its bill matches the trace to the cent.

ecs.g7.xlarge in the trace: ¥0.24/h from 09:00, 0.26 from 09:10, 0.31 from 09:20:30, 0.70
from 09:30, 0.68 from 09:45, 0.52 from 10:00, 0.44 from 10:15:20, 0.36 from 10:30.
The job bids SpotDiscountLimit 0.8 = ¥0.64/h for 2 pods. The market ticks every 30 s (at :00
and :30), billing every minute at :35.
"""

from __future__ import annotations

import csv
import random
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from apps.billing.selectors import job_cost, workspace_daily_bills
from apps.billing.services import billing_accrue
from apps.jobs.models import Job, JobStatus, PodStatus
from apps.jobs.services import job_transition
from apps.market.selectors import job_bid_history
from apps.market.services import market_step
from tests.integration.test_market_step import G7, submit

pytestmark = pytest.mark.django_db

TRACE = Path(django_settings.BASE_DIR) / "examples" / "spot-prices.csv"
T = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _setup(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.MARKET_REPLAY_CSV = str(TRACE)
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 10


def hm(hour: int, minute: int, second: int = 0) -> datetime:
    return T.replace(hour=hour, minute=minute, second=second)


def job_finish(*, job: Job, now: datetime) -> None:
    """Stand-in for the execution layer: every live pod exits 0 and the job succeeds."""
    job.pods.filter(status=PodStatus.RUNNING).update(
        status=PodStatus.SUCCEEDED, exit_code=0, finished_at=now
    )
    job_transition(
        job=job,
        status=JobStatus.SUCCEEDED,
        now=now,
        reason_code="JobSucceeded",
        reason_message="All workers exited 0",
    )


def run(job: Job, *, until: datetime, finish_at: datetime | None = None) -> list[tuple]:
    """Drive the clock: market ticks every 30 s, billing every minute at :35, the job's
    finish at `finish_at`. Returns (time, status) whenever the job's status changed."""
    seen, moment = [], T
    while moment <= until:
        if finish_at is not None and moment <= finish_at < moment + timedelta(seconds=5):
            job.refresh_from_db()
            job_finish(job=job, now=finish_at)
        if moment.second in (0, 30):
            market_step(now=moment, rng=random.Random(1))
        if moment.second == 35:
            billing_accrue(now=moment)
        job.refresh_from_db()
        if not seen or seen[-1][1] != job.status:
            seen.append((moment, job.status))
        moment += timedelta(seconds=5)
    return seen


def trace_bill(pod_runs: list[tuple[datetime, datetime]]) -> Decimal:
    """The bill from the trace file alone: each minute a pod ran in, at the trace price in
    force at the later of the minute's start and the pod's start."""
    with TRACE.open() as f:
        points = sorted(
            (datetime.fromisoformat(row["timestamp"]), Decimal(row["price"]))
            for row in csv.DictReader(f)
            if row["instance_type"] == G7
        )
    total = Decimal(0)
    for start, end in pod_runs:
        minute = start.replace(second=0)
        while minute < end:
            moment = max(minute, start)
            price = [p for at, p in points if at <= moment][-1]
            total += (price / 60).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
            minute += timedelta(minutes=1)
    return total


def test_a_spot_job_with_aimaster_survives_a_price_spike_and_is_billed_to_the_cent(personas):
    job = submit(personas, discount="0.8", pods=2, aimaster=True, now=hm(8, 59, 40), name="spiky")
    assert job.status == JobStatus.BIDDING

    seen = run(job, until=hm(10, 45), finish_at=hm(10, 40, 20))

    assert seen == [
        (hm(9, 0), JobStatus.RUNNING),  # ¥0.24 ≤ ¥0.64: both pods start at once
        (hm(9, 30), JobStatus.BIDDING),  # ¥0.70 > ¥0.64: reclaimed, AIMaster re-bids
        (hm(10, 0), JobStatus.RUNNING),  # ¥0.52: the bid wins again
        (hm(10, 40, 20), JobStatus.SUCCEEDED),
    ]
    job.refresh_from_db()
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Bidding",
        "EnvPreparing",
        "Running",
        "Bidding",
        "EnvPreparing",
        "Running",
        "Succeeded",
    ]
    assert (job.restart_times, job.attempt) == (0, 1)  # a reclaim spends no restart
    restart = job.restarts.get()
    assert restart.cause == "SpotPriceExceeded" and restart.at == hm(9, 30)
    assert not restart.counted
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds == [
        "Submitted",
        "Bidding",
        "BidAccepted",
        "Reclaimed",
        "PodReclaimed",  # each of its two pods
        "PodReclaimed",
        "Requeued",
        "BidAccepted",
        "Resumed",
    ]
    assert (
        job.events.filter(kind="BidAccepted").first().message
        == "Bid accepted at ¥0.64/h (market ¥0.24/h)"
    )

    pods = list(job.pods.order_by("attempt", "index"))
    assert [(p.attempt, p.status, p.started_at, p.finished_at) for p in pods] == [
        (0, PodStatus.PREEMPTED, hm(9, 0), hm(9, 30)),
        (0, PodStatus.PREEMPTED, hm(9, 0), hm(9, 30)),
        (1, PodStatus.SUCCEEDED, hm(10, 0), hm(10, 40, 20)),
        (1, PodStatus.SUCCEEDED, hm(10, 0), hm(10, 40, 20)),
    ]
    assert pods[0].reason == "SpotPriceExceeded"

    expected = trace_bill([(p.started_at, p.finished_at) for p in pods])
    assert expected == Decimal("0.883000")  # 2 × (30 min before the spike + 41 after)
    assert job_cost(job=job) == expected
    assert job_cost(job=job).quantize(Decimal("0.01")) == Decimal("0.88")
    assert job.bill_lines.count() == 2 * (30 + 41)
    assert set(job.bill_lines.values_list("pay_type", flat=True)) == {"spot"}

    billing_accrue(now=hm(11, 30))  # a late, repeated run bills nothing more
    assert job_cost(job=job) == expected
    [day] = workspace_daily_bills(
        user=personas["alice"], workspace=personas["ws_a"], now=hm(11, 30)
    )
    assert day.spot == expected and not day.complete

    history = job_bid_history(job=job, now=hm(11, 0))
    assert [(b.role_type, b.bid_per_hour) for b in history.bids] == [("Worker", Decimal("0.6400"))]
    prices = [p for _, p in history.prices[G7]]
    assert Decimal("0.7000") in prices and Decimal("0.2400") in prices
