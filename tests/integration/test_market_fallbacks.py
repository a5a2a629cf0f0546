"""ElasticSpotSpecs in the live market tick: a spot role falls back on further instance
types, each with its own bid, in the order given; the job, its pods, its bills and its
events say which type it got.

ecs.g7.xlarge (¥0.80/h, 20 public instances, no GPU) is the roles' own type here;
ecs.gn7i-c8g1.2xlarge (¥9.60/h, 8 instances, 1 GPU, more vCPUs and memory) the fallback.
"""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from apps.billing.models import BillLine
from apps.billing.services import billing_accrue
from apps.jobs.models import JobStatus, PodStatus
from apps.jobs.specs import RoleSpec, SpotFallback
from tests.integration.test_market_step import (
    G7,
    NOW,
    at,
    reason,
    reload,
    replay_writer,
    step,
    submit,
)

pytestmark = pytest.mark.django_db

GN7 = "ecs.gn7i-c8g1.2xlarge"


@pytest.fixture
def replay(settings, tmp_path):
    return replay_writer(settings, tmp_path)


def submit_with_fallback(personas, *, pods: int = 1, discount: str = "0.8", **kwargs):
    """G7 at `discount` (0.8: ¥0.64/h), then GN7 at SpotDiscountLimit 0.5 (¥4.80/h)."""
    role = RoleSpec(
        pod_count=pods,
        instance_type=G7,
        spot_discount_limit=D(discount),
        elastic_spot_specs=[SpotFallback(instance_type=GN7, spot_discount_limit=D("0.5"))],
    )
    return submit(personas, roles=[role], **kwargs)


def test_it_falls_back_to_the_second_type_when_the_first_has_no_stock(personas, replay):
    replay([(NOW, G7, "0.30"), (NOW, GN7, "3.00")])
    payg = submit(personas, source="public", pods=19, name="payg")
    job = submit_with_fallback(personas, pods=2, now=at(0, 1))
    step(at(0))
    reload(payg, job)
    assert payg.status == JobStatus.RUNNING
    assert job.status == JobStatus.RUNNING
    assert {p.instance_type.name for p in job.pods.all()} == {GN7}
    accepted = job.events.get(kind="BidAccepted").message
    assert accepted == f"Bid accepted at ¥4.80/h for {GN7} (market ¥3.00/h)"
    billing_accrue(now=at(2))
    billed = set(
        BillLine.objects.filter(job=job).values_list("instance_type__name", "price_per_hour")
    )
    assert billed == {(GN7, D("3.0000"))}


def test_it_falls_back_when_the_first_types_price_is_above_its_bid(personas, replay):
    replay([(NOW, G7, "0.70"), (NOW, GN7, "3.00")])
    job = submit_with_fallback(personas)  # ¥0.64/h < ¥0.70/h on G7
    step(at(0))
    reload(job)
    assert job.status == JobStatus.RUNNING
    assert job.pods.get().instance_type.name == GN7


def test_it_keeps_the_first_type_while_it_will_do(personas, replay):
    replay([(NOW, G7, "0.30"), (NOW, GN7, "3.00")])
    job = submit_with_fallback(personas)
    step(at(0))
    reload(job)
    assert job.pods.get().instance_type.name == G7
    assert job.events.get(kind="BidAccepted").message == (
        f"Bid accepted at ¥0.64/h for {G7} (market ¥0.30/h)"
    )


def test_it_says_why_each_type_will_not_do(personas, replay):
    replay([(NOW, G7, "0.70"), (NOW, GN7, "5.00")])
    job = submit_with_fallback(personas)
    step(at(0))
    reload(job)
    assert job.status == JobStatus.BIDDING
    assert reason(job) == (
        f"bid ¥0.64/h < market ¥0.70/h for {G7}; bid ¥4.80/h < market ¥5.00/h for {GN7}"
    )


def test_a_running_fallback_is_held_to_its_own_bid(personas, replay):
    """On GN7 the job keeps running at ¥4.00/h (its GN7 limit is ¥4.80/h, though its own
    type's bid is ¥0.64/h), and is reclaimed when GN7 passes ¥4.80/h."""
    replay([(NOW, G7, "0.70"), (NOW, GN7, "3.00"), (at(1), GN7, "4.00"), (at(2), GN7, "5.00")])
    job = submit_with_fallback(personas)
    step(at(0))
    step(at(1))
    reload(job)
    assert job.status == JobStatus.RUNNING
    step(at(2))
    reload(job)
    assert job.status == JobStatus.FAILED and job.reason_code == "SpotPriceExceeded"
    assert f"bid ¥4.80/h < market ¥5.00/h for {GN7}" in job.reason_message


def test_a_reclaimed_job_re_bids_across_the_list(personas, replay):
    """Reclaimed on its own type, the job with AIMaster bids again over the same list and
    runs its next attempt on the fallback; its history pod keeps the type it ran on."""
    replay([(NOW, G7, "0.30"), (NOW, GN7, "3.00"), (at(1), G7, "0.70")])
    job = submit_with_fallback(personas, aimaster=True)
    step(at(0))
    step(at(1))
    reload(job)
    assert job.status == JobStatus.BIDDING and job.reason_code == "SpotPriceExceeded"
    step(at(2))
    reload(job)
    assert job.status == JobStatus.RUNNING and job.attempt == 1
    pods = {p.attempt: p for p in job.pods.select_related("instance_type")}
    assert pods[0].status == PodStatus.PREEMPTED and pods[0].instance_type.name == G7
    assert pods[1].status == PodStatus.RUNNING and pods[1].instance_type.name == GN7
    accepted = list(job.events.filter(kind="BidAccepted").values_list("message", flat=True))
    assert accepted == [
        f"Bid accepted at ¥0.64/h for {G7} (market ¥0.30/h)",
        f"Bid accepted at ¥4.80/h for {GN7} (market ¥3.00/h)",
    ]
