"""SubStatus through the official SDK: GetJob and ListJobs say, as a code, what the status
leaves open (why a Queuing or Bidding job waits; whether a Running quota job's pods run In
Quota or Not in Quota; a Restarting job's cause), the same as the console's job page."""

from __future__ import annotations

import html
import random
from datetime import timedelta

from alibabacloud_pai_dlc20201203.models import GetJobRequest, ListJobsRequest
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job, JobStatus
from apps.market.services import market_step
from apps.scheduler.services import scheduler_tick
from tests.api.conftest import quota_job_body, spot_job_body
from tests.integration.test_market_step import replay_writer

EIGHT_GPUS = [
    {
        "Type": "Worker",
        "PodCount": 2,
        "Image": "pytorch:2.3",
        "ResourceConfig": {"CPU": "8", "Memory": "32Gi", "GPU": "4"},
    }
]


def sub_statuses(dlc, ws_a: str, job_id: str) -> tuple[str | None, str | None]:
    """(GetJob's SubStatus, ListJobs') of a job."""
    got = dlc.get_job(job_id, GetJobRequest()).body.sub_status
    jobs = dlc.list_jobs(ListJobsRequest(workspace_id=ws_a, page_size=50)).body.jobs
    return got, next(j.sub_status for j in jobs if j.job_id == job_id)


def on_page(client, job_id: str) -> str:
    """The job page's SubStatus code: its text, or the title of a label in the reader's
    words (In Quota, Not in Quota)."""
    page = html.unescape(client.get(reverse("jobs:detail", args=[job_id])).content.decode())
    start = page.index('id="sub-status">') + len('id="sub-status">')
    if page.startswith('<span title="', start):
        start += len('<span title="')
        return page[start : page.index('"', start)]
    return page[start : page.index("<", start)]


def test_a_job_queued_for_its_quota_says_so(dlc, create_job, ws_a, alice_client):
    first, second = (
        create_job(quota_job_body(ws_a, DisplayName=f"big-{i}", JobSpecs=EIGHT_GPUS))
        for i in range(2)
    )
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    assert Job.objects.get(job_id=first).status == JobStatus.RUNNING  # team-a's 8 GPUs
    assert Job.objects.get(job_id=second).pending_reason.startswith("quota team-a: needs")
    assert sub_statuses(dlc, ws_a, second) == ("QuotaInsufficient", "QuotaInsufficient")
    assert on_page(alice_client, second) == "QuotaInsufficient"


def test_a_running_quota_job_says_whether_it_runs_in_its_quota(dlc, create_job, ws_a, alice_client):
    owner = create_job(quota_job_body(ws_a, DisplayName="owner"))
    idle = create_job(
        quota_job_body(
            ws_a, DisplayName="borrower", Settings={"OversoldType": "ForceQuotaOverSold"}
        )
    )
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    assert sub_statuses(dlc, ws_a, owner) == ("InQuota", "InQuota")
    assert sub_statuses(dlc, ws_a, idle) == ("NotInQuota", "NotInQuota")
    assert on_page(alice_client, idle) == "NotInQuota"
    body = dlc.get_job(idle, GetJobRequest()).body
    assert (body.status, body.resource_level) == ("Running", "NotInQuota")


def test_a_bidding_job_names_what_it_waits_for(dlc, create_job, ws_a, settings, tmp_path):
    now = timezone.now()
    replay_writer(settings, tmp_path)([(now - timedelta(minutes=5), "ecs.g7.xlarge", "0.50")])
    low = create_job(spot_job_body(ws_a, DisplayName="low"))  # ¥0.32/h
    payg = spot_job_body(ws_a, DisplayName="payg")
    del payg["JobSpecs"][0]["SpotSpec"]
    payg["JobSpecs"][0]["PodCount"] = 5  # of 20 public instances
    create_job(payg)
    market_step(now=now - timedelta(minutes=2), rng=random.Random(1))
    many = spot_job_body(ws_a, {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.9})
    many["JobSpecs"][0]["PodCount"] = 16  # of the 15 left
    short = create_job({**many, "DisplayName": "short"})
    market_step(now=now - timedelta(minutes=1), rng=random.Random(1))
    assert sub_statuses(dlc, ws_a, low) == ("BidBelowMarketPrice", "BidBelowMarketPrice")
    assert sub_statuses(dlc, ws_a, short) == ("SpotStockShortage", "SpotStockShortage")
    assert dlc.get_job(short, GetJobRequest()).body.reason_code == "SpotStockShortage"


def test_a_finished_job_has_none(dlc, create_job, ws_a):
    job_id = create_job(quota_job_body(ws_a))
    Job.objects.filter(job_id=job_id).update(status=JobStatus.SUCCEEDED, sub_status="Stale")
    assert sub_statuses(dlc, ws_a, job_id) == (None, None)


def test_a_restarting_job_names_the_cause(dlc, create_job, ws_a):
    job_id = create_job(quota_job_body(ws_a))
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    Job.objects.filter(job_id=job_id).update(status=JobStatus.RESTARTING, reason_code="PodFailed")
    assert sub_statuses(dlc, ws_a, job_id) == ("PodFailed", "PodFailed")
