"""An admin changes an instance type's original price while its jobs run (the Django admin,
the cluster file): each minute is billed at the price in force at its start, pay-as-you-go
(the original price history) as spot (the market price history); the market price keeps
its share of the original, so the discount bids running on the type hold as they did."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal as D

import pytest
from django.utils import timezone

from apps.billing.models import BillLine
from apps.billing.selectors import job_cost
from apps.billing.services import billing_accrue
from apps.cluster.clusterfile import cluster_file_check
from apps.cluster.models import InstanceType, OriginalPrice
from apps.cluster.selectors import cluster_state
from apps.jobs.models import Job, JobStatus
from apps.jobs.selectors import busy_node_names
from apps.market.models import MarketState, PricePoint
from apps.market.services import market_params_set
from apps.ops.services import cluster_apply
from tests.integration.test_market_step import G7, LJ, NOW, at, replay_writer, step, submit

pytestmark = pytest.mark.django_db


class _Clock:
    now = NOW - timedelta(hours=1)


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """timezone.now() as the test sets it: the time an admin's change is recorded at. The
    cluster is declared an hour before the jobs here."""
    clock = _Clock()
    monkeypatch.setattr(timezone, "now", lambda: clock.now)
    return clock


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _prices(settings, tmp_path):
    replay_writer(settings, tmp_path)([(NOW - timedelta(hours=1), G7, "0.30")])


def lines(job: Job) -> list[tuple[int, D]]:
    """(minute offset from NOW, price per hour) of the job's bill lines."""
    base = int(NOW.timestamp()) // 60
    return [
        (m - base, p)
        for m, p in BillLine.objects.filter(job=job)
        .order_by("pod_id", "minute")
        .values_list("minute", "price_per_hour")
    ]


def _admin_sets_price(clock, when, price: str) -> None:
    clock.now = when
    g7 = InstanceType.objects.get(name=G7)
    g7.price_per_hour = D(price)
    g7.save()  # what the Django admin's change form does


def test_a_change_of_the_original_price_reaches_only_the_minutes_after_it(personas, clock):
    job = submit(personas, source="public")
    step(at(0))
    billing_accrue(now=at(0, 30))
    _admin_sets_price(clock, at(1, 30), "1.60")
    billing_accrue(now=at(2, 10))  # minute 1 started at ¥0.80/h, minute 2 at ¥1.60/h
    _admin_sets_price(clock, at(2, 20), "0.40")
    billing_accrue(now=at(3, 5))
    assert lines(job) == [(0, D("0.8000")), (1, D("0.8000")), (2, D("1.6000")), (3, D("0.4000"))]
    assert job_cost(job=job) == D("0.013333") * 2 + D("0.026667") + D("0.006667")


def test_the_cluster_file_changes_the_original_price_from_when_it_is_applied(personas, clock):
    job = submit(personas, source="public")
    step(at(0))
    clock.now = at(0, 45)
    g7 = {
        "resource_type": "ECS",
        "vcpus": 4,
        "memory_gib": 16,
        "price_per_hour": "2.40",
        "public_capacity": 20,
    }
    declaration, errors = cluster_file_check(
        {"instance_types": {G7: g7}}, existing=cluster_state(busy=busy_node_names()), environ={}
    )
    assert errors == []
    report = cluster_apply(declaration=declaration)
    assert report.changes == [f"updated instance type {G7}: price_per_hour 0.8000 → 2.40"]
    billing_accrue(now=at(1, 5))
    assert lines(job) == [(0, D("0.8000")), (1, D("2.4000"))]
    assert list(
        OriginalPrice.objects.filter(instance_type__name=G7).values_list("at", "price_per_hour")
    ) == [(NOW - timedelta(hours=1), D("0.8000")), (at(0, 45), D("2.4000"))]


# --- the market follows the original price --------------------------------------------------


def _market_at(itype: str, price: str, *, since) -> None:
    """The type's market price stood at `price` since `since` (a busy market)."""
    t = InstanceType.objects.get(name=itype)
    MarketState.objects.filter(instance_type=t).update(price_per_hour=D(price))
    PricePoint.objects.filter(instance_type=t, at__gte=since).delete()
    PricePoint.objects.create(instance_type=t, at=since, price_per_hour=D(price))


def _set_price(clock, itype: str, when, price: str) -> None:
    clock.now = when
    t = InstanceType.objects.get(name=itype)
    t.price_per_hour = D(price)
    t.save()


def test_halving_the_original_keeps_a_discount_bid_above_a_market_it_was_above(
    personas, clock, settings
):
    settings.MARKET_REPLAY_CSV = ""  # the market's own model
    market_params_set(volatility=0)
    job = submit(personas, discount="0.6")  # 60% of the original: ¥0.48/h
    step(at(0))
    _market_at(G7, "0.40", since=at(0, 10))  # 50% of ¥0.80/h
    _set_price(clock, G7, at(0, 30), "0.40")  # the bid is ¥0.24/h now
    state = MarketState.objects.get(instance_type__name=G7)
    assert (state.price_per_hour, state.asked_per_hour) == (D("0.2000"), D("0.2000"))
    for minute in (1, 2, 3):
        step(at(minute))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING, job.reason_message
    moved = PricePoint.objects.get(instance_type__name=G7, at=at(0, 30))
    assert moved.price_per_hour == D("0.2000")  # spot minutes from 12:00:30 on pay this


def test_halving_a_lingjun_original_keeps_a_discount_bid_above_the_system_average(
    personas, clock, settings
):
    settings.MARKET_REPLAY_CSV = ""
    market_params_set(volatility=0)
    job = submit(personas, itype=LJ, discount="0.6")  # 60% of ¥200/h
    step(at(0))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    _market_at(LJ, "100", since=NOW - timedelta(hours=2))  # 50% for hours
    _set_price(clock, LJ, at(0, 30), "100")  # the bid is ¥60/h now, the market ¥50/h
    for minute in (1, 2, 3):
        step(at(minute))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING, job.reason_message
    average = MarketState.objects.get(instance_type__name=LJ).average_per_hour
    assert average is not None and average < D("60")
