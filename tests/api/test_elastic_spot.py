"""ElasticSpotSpecs through the official SDK: a spot role's fallback instance types, each
with its own bid, tried in order after its own EcsSpec; GetJob and the job page say which
type the job got, and a bad entry is a 400 naming it.

SDK 1.4.17 has no ElasticSpotSpecs (its JobSpec drops the field): the tests that send them
through the SDK are marked newer_sdk; the refusals are sent signed by hand as well, so the
pinned pass checks them too.
"""

from __future__ import annotations

import html
import json
import random
from datetime import timedelta

import pytest
from alibabacloud_pai_dlc20201203.models import GetJobRequest
from django.urls import reverse
from django.utils import timezone

from apps.cluster.models import InstanceType
from apps.jobs.models import Job, JobStatus
from apps.jobs.services import job_admit, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.market.services import market_step
from tests.api.conftest import sdk_error, spot_job_body
from tests.integration.test_market_step import replay_writer

pytestmark = pytest.mark.django_db

G7, GN7, LJ = "ecs.g7.xlarge", "ecs.gn7i-c8g1.2xlarge", "ml.gu8xf.8xlarge-gu108"
FALLBACK = {"InstanceType": GN7, "SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.5}


def fallback_body(ws_a: str, *fallbacks: dict, main: str = G7, **overrides) -> dict:
    body = spot_job_body(
        ws_a, {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.8}, **overrides
    )
    body["JobSpecs"][0]["EcsSpec"] = main
    body["JobSpecs"][0]["ElasticSpotSpecs"] = list(fallbacks or [FALLBACK])
    return body


@pytest.fixture
def prices(settings, tmp_path):
    """prices([(minutes from now, type, ¥/h)…]): the market's replayed prices."""
    write = replay_writer(settings, tmp_path)
    start = timezone.now() - timedelta(minutes=30)
    return lambda rows: write([(start + timedelta(minutes=m), t, p) for m, t, p in rows])


def tick(minutes: float) -> None:
    """A market step `minutes` after the replay's start (half an hour ago)."""
    now = timezone.now() - timedelta(minutes=30) + timedelta(minutes=minutes)
    market_step(now=now, rng=random.Random(1))


def replicas(dlc, job_id: str):
    return dlc.get_job(job_id, GetJobRequest()).body.job_replica_statuses[0]


@pytest.mark.newer_sdk
def test_it_falls_back_to_the_second_type_when_the_first_has_no_stock(
    dlc, create_job, ws_a, personas, prices, alice_client
):
    prices([(0, G7, "0.30"), (0, GN7, "3.00")])
    public = JobSpec(
        display_name="takes-g7",
        user_command="true",
        resource_source="public",
        roles=[RoleSpec(pod_count=20, instance_type=G7)],
    )
    taker = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=public)
    job_admit(job_pk=taker.pk, now=timezone.now())
    job_id = create_job(fallback_body(ws_a))
    tick(1)
    assert Job.objects.get(pk=taker.pk).status == JobStatus.RUNNING  # all 20 of G7
    body = dlc.get_job(job_id, GetJobRequest()).body
    assert body.status == "Running"
    assert body.job_replica_statuses[0].current_spot_instance_type == GN7
    assert [s.to_map() for s in body.job_specs[0].elastic_spot_specs] == [FALLBACK]
    assert body.job_specs[0].ecs_spec == G7  # the role's own type stays its first choice
    page = html.unescape(alice_client.get(reverse("jobs:detail", args=[job_id])).content.decode())
    assert f"Bid accepted at ¥4.80/h for {GN7} (market ¥3.00/h)" in page
    pods = page[page.index('id="pods"') :].split("</section>")[0]
    assert f'<span class="pod-instance-type">{GN7}</span>' in pods  # where the pod runs


@pytest.mark.newer_sdk
def test_it_falls_back_when_the_first_types_price_is_above_its_bid(dlc, create_job, ws_a, prices):
    prices([(0, G7, "0.70"), (0, GN7, "3.00")])  # the bid on G7 is ¥0.64/h
    job_id = create_job(fallback_body(ws_a))
    tick(1)
    assert replicas(dlc, job_id).current_spot_instance_type == GN7


@pytest.mark.newer_sdk
def test_a_bidding_job_names_each_types_price(dlc, create_job, ws_a, prices):
    prices([(0, G7, "0.70"), (0, GN7, "5.00")])
    job_id = create_job(fallback_body(ws_a))
    tick(1)
    body = dlc.get_job(job_id, GetJobRequest()).body
    assert (body.status, body.reason_code) == ("Bidding", "BidBelowMarketPrice")
    assert body.reason_message == (
        f"bid ¥0.64/h < market ¥0.70/h for {G7}; bid ¥4.80/h < market ¥5.00/h for {GN7}"
    )


@pytest.mark.newer_sdk
def test_a_reclaimed_job_re_bids_across_the_list(dlc, create_job, ws_a, prices):
    prices([(0, G7, "0.30"), (0, GN7, "3.00"), (2, G7, "0.70")])
    body = fallback_body(ws_a, Settings={"EnableErrorMonitoringInAIMaster": True})
    job_id = create_job(body)
    tick(1)
    assert replicas(dlc, job_id).current_spot_instance_type == G7
    tick(2)  # G7 passes the bid: reclaimed, AIMaster bids again
    got = dlc.get_job(job_id, GetJobRequest()).body
    assert (got.status, got.reason_code) == ("Bidding", "SpotPriceExceeded")
    tick(3)
    got = dlc.get_job(job_id, GetJobRequest()).body
    assert got.status == "Running"
    assert got.job_replica_statuses[0].current_spot_instance_type == GN7
    assert [p.status for p in got.pods[0].history_pods] == ["Preempted"]


def _refusals(ws_a: str) -> list[tuple[dict, str, str]]:
    """(body, the parameter named, a word of the reason)."""
    other = {**FALLBACK, "InstanceType": G7}
    return [
        (fallback_body(ws_a, FALLBACK, {**FALLBACK, "InstanceType": "ecs.nope"}),
         "JobSpecs[0].ElasticSpotSpecs[1].InstanceType", "unknown instance type"),
        (fallback_body(ws_a, FALLBACK, FALLBACK),
         "JobSpecs[0].ElasticSpotSpecs[1].InstanceType", "named already"),
        (fallback_body(ws_a, other),
         "JobSpecs[0].ElasticSpotSpecs[0].InstanceType", "named already"),
        (fallback_body(ws_a, {**FALLBACK, "InstanceType": LJ}),
         "JobSpecs[0].ElasticSpotSpecs[0].InstanceType", "is Lingjun"),
        (fallback_body(ws_a, {**FALLBACK, "InstanceType": G7}, main=GN7),
         "JobSpecs[0].ElasticSpotSpecs[0].InstanceType", "less than the role's pods need"),
        (fallback_body(ws_a, {**FALLBACK, "SpotPriceLimit": 0.1}),
         "JobSpecs[0].ElasticSpotSpecs[0].SpotPriceLimit", "only one of"),
        (fallback_body(ws_a, {"InstanceType": GN7, "SpotPriceLimit": 4.8}),
         "JobSpecs[0].ElasticSpotSpecs[0].SpotPriceLimit", "market price range"),
        (fallback_body(ws_a, {**FALLBACK, "SpotDiscountLimit": 90}),
         "JobSpecs[0].ElasticSpotSpecs[0].SpotDiscountLimit", "one of 0.1"),
        (fallback_body(ws_a, {"InstanceType": GN7}),
         "JobSpecs[0].ElasticSpotSpecs[0].SpotDiscountLimit", "set a SpotDiscountLimit"),
        (fallback_body(ws_a, {**FALLBACK, "SpotStrategy": "LowestPrice"}),
         "JobSpecs[0].ElasticSpotSpecs[0].SpotStrategy", "SpotWithPriceLimit"),
        (fallback_body(ws_a, {**FALLBACK, "Priority": 1}),
         "JobSpecs[0].ElasticSpotSpecs[0].Priority", "not supported here"),
        (fallback_body(ws_a, *({**FALLBACK, "InstanceType": f"ecs.t{i}"} for i in range(6))),
         "JobSpecs[0].ElasticSpotSpecs", "at most 5"),
    ]  # fmt: skip


def test_it_refuses_a_bad_elastic_spot_spec_naming_it(raw, ws_a, personas):
    for body, field, words in _refusals(ws_a):
        response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
        assert response.status_code == 400, (field, response.text)
        assert response.json()["Code"] == "InvalidParameter"
        message = response.json()["Message"]
        assert f"{field}: " in message and words in message, (field, message)
    assert not Job.objects.exists()


def test_it_refuses_fallbacks_on_a_job_that_does_not_bid(raw, ws_a):
    body = spot_job_body(ws_a)
    del body["JobSpecs"][0]["SpotSpec"]
    body["JobSpecs"][0]["ElasticSpotSpecs"] = [FALLBACK]
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert response.status_code == 400
    assert (
        "JobSpecs[0].ElasticSpotSpecs: fallback instance types apply only to spot jobs"
        in (response.json()["Message"])
    )


@pytest.mark.newer_sdk
def test_the_sdk_gets_the_400_with_the_entry_named(dlc, create_job, ws_a):
    with pytest.raises(Exception) as excinfo:
        create_job(fallback_body(ws_a, FALLBACK, {**FALLBACK, "InstanceType": "ecs.nope"}))
    assert sdk_error(excinfo) == ("InvalidParameter", 400)
    assert "JobSpecs[0].ElasticSpotSpecs[1].InstanceType" in str(excinfo.value)


def test_a_fallback_no_longer_sold_as_spot_is_passed_over(raw, ws_a, prices):
    """Stored with the job, the fallback is skipped once the cluster stops selling it as
    spot: the job bids on its own type alone."""
    prices([(0, G7, "0.70"), (0, GN7, "3.00")])
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(fallback_body(ws_a)).encode())
    job_id = response.json()["JobId"]
    InstanceType.objects.filter(name=GN7).update(spot_enabled=False)
    tick(1)
    got = raw.send("GET", f"/api/v1/jobs/{job_id}").json()
    assert got["Status"] == "Bidding"
    assert got["ReasonMessage"] == f"bid ¥0.64/h < market ¥0.70/h for {G7}"
