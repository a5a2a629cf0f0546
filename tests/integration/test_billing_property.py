"""Property: whatever the price trace, the pods' run times and when billing runs, each pod is
billed exactly the sum of its minutes' prices — every minute it ran in, once, at the
market price in force at the later of the minute's start and the pod's start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.db import transaction
from django.db.models import Count, Max, Min, Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.billing.models import BillDay, BillLine
from apps.billing.services import billing_accrue, pod_meters_open
from apps.cluster.models import InstanceType
from apps.jobs.models import Job, JobStatus, Pod, PodStatus
from apps.jobs.services import job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.market.models import PricePoint

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 11, 58, 20, tzinfo=UTC)
PRICES = st.integers(min_value=800, max_value=8000).map(lambda n: Decimal(n) / 10000)


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


trace = st.lists(st.tuples(st.integers(1, 1800), PRICES), max_size=8).map(
    lambda points: sorted({t: p for t, p in points}.items())
)
pods = st.lists(
    st.tuples(st.integers(0, 1200), st.integers(1, 900) | st.none()), min_size=1, max_size=3
)
runs = st.lists(st.integers(0, 2400), max_size=5)


def expected(start: float, end: float, points: list[tuple[float, Decimal]]) -> Decimal:
    """The oracle, written independently of the billing code."""
    total, minute = Decimal(0), int(start // 60)
    while minute * 60 < end:
        moment = max(minute * 60, start)
        price = [p for t, p in points if t <= moment][-1]
        total += (price / 60).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
        minute += 1
    return total


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=PRICES, changes=trace, pods=pods, runs=runs)
def test_billed_money_is_the_sum_of_each_pods_minute_prices(personas, first, changes, pods, runs):
    with transaction.atomic():
        _check(personas, first, changes, pods, runs)
        transaction.set_rollback(True)


def _check(personas, first, changes, pod_times, runs) -> None:
    g7 = InstanceType.objects.get(name="ecs.g7.xlarge")
    points = [(T0, first)] + [(T0 + timedelta(seconds=t), p) for t, p in changes]
    PricePoint.objects.bulk_create(
        PricePoint(instance_type=g7, at=when, price_per_hour=p) for when, p in points
    )
    spec = JobSpec(
        display_name="p",
        user_command="x",
        resource_source="spot",
        roles=[
            RoleSpec(
                pod_count=len(pod_times), instance_type=g7.name, spot_discount_limit=Decimal("0.9")
            )
        ],
    )
    job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec, now=T0)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    role = job.roles.get()
    events = []  # (when, order, action, pod index): starts before finishes before billing
    for i, (offset, duration) in enumerate(pod_times):
        events.append((offset, 0, "start", i))
        if duration is not None:
            events.append((offset + duration, 1, "finish", i))
    events += [(t, 2, "bill", None) for t in runs]
    final = max(t for t, *_ in events) + 60
    events.append((final, 2, "bill", None))
    made: dict[int, Pod] = {}
    for offset, _, action, i in sorted(events, key=lambda e: e[:2]):
        when = T0 + timedelta(seconds=offset)
        if action == "start":
            made[i] = Pod.objects.create(
                job=job,
                role=role,
                index=i,
                pod_id=f"p{i}",
                status=PodStatus.RUNNING,
                started_at=when,
            )
            pod_meters_open(pod_ids=[made[i].pk])
        elif action == "finish":
            Pod.objects.filter(pk=made[i].pk).update(status=PodStatus.SUCCEEDED, finished_at=when)
        else:
            billing_accrue(now=when)
    by_time = [(when.timestamp(), p) for when, p in points]
    for i, (offset, duration) in enumerate(pod_times):
        start = (T0 + timedelta(seconds=offset)).timestamp()
        end = (
            start + duration
            if duration is not None
            else (T0 + timedelta(seconds=final)).timestamp()
        )
        billed = sum(
            BillLine.objects.filter(pod=made[i]).values_list("amount", flat=True), Decimal(0)
        )
        assert billed == expected(start, end, by_time), (i, offset, duration)
    # What the pages read, each pod's day summed as it was billed, run after run, is the
    # sum of its lines.
    days = {
        (d.pod_id, d.day): (d.minutes, d.amount, d.first_minute, d.last_minute, d.low, d.high)
        for d in BillDay.objects.filter(job=job)
    }
    sums = {
        (r["pod_id"], r["day"]): (r["n"], r["total"], r["first"], r["last"], r["low"], r["high"])
        for r in BillLine.objects.filter(job=job)
        .values("pod_id", "day")
        .annotate(
            n=Count("id"),
            total=Sum("amount"),
            first=Min("minute"),
            last=Max("minute"),
            low=Min("price_per_hour"),
            high=Max("price_per_hour"),
        )
    }
    assert days == sums
