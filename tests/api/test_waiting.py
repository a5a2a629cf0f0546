"""Why a job waits, through the official SDK: GetJob and ListJobs give the real reason and the
job's place in its queue, in the same words as its console page (`waiting_text`)."""

from __future__ import annotations

import html
import random
from datetime import timedelta

from alibabacloud_pai_dlc20201203.models import GetJobRequest, ListJobsRequest
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job, JobStatus
from apps.jobs.waiting import waiting_text
from apps.market.selectors import waiting_show
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


def _get(dlc, job_id):
    return dlc.get_job(job_id, GetJobRequest()).body


def _listed(dlc, ws_a, job_id):
    jobs = dlc.list_jobs(ListJobsRequest(workspace_id=ws_a, page_size=50)).body.jobs
    return next(j for j in jobs if j.job_id == job_id)


def test_a_queued_job_says_why_it_waits_and_where_it_stands(dlc, create_job, ws_a, alice_client):
    ids = [
        create_job(quota_job_body(ws_a, DisplayName=f"big-{i}", JobSpecs=EIGHT_GPUS))
        for i in range(3)
    ]
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    first, second, third = (Job.objects.get(job_id=i) for i in ids)
    assert first.status != JobStatus.QUEUING  # team-a's 8 GPUs hold one of them
    assert (second.queue_position, second.queue_size) == (1, 2)
    assert (third.queue_position, third.queue_size) == (2, 2)

    body = _get(dlc, third.job_id)
    assert body.status == "Queuing"
    assert body.reason_message == waiting_text(third)
    assert third.pending_reason and body.reason_message.startswith(third.pending_reason)
    assert body.reason_message.endswith("position 2 of 2 in the queue of quota team-a")
    assert _listed(dlc, ws_a, third.job_id).reason_message == body.reason_message
    page = alice_client.get(reverse("jobs:detail", args=[third.job_id])).content.decode()
    assert body.reason_message in html.unescape(page)  # the console's words


def test_a_spot_job_below_the_market_names_its_bid_and_the_price(
    dlc, create_job, ws_a, settings, tmp_path
):
    now = timezone.now()
    replay_writer(settings, tmp_path)([(now - timedelta(minutes=5), "ecs.g7.xlarge", "0.50")])
    job_id = create_job(spot_job_body(ws_a))  # SpotDiscountLimit 0.4 of ¥0.80/h: ¥0.32/h
    assert _get(dlc, job_id).reason_message == "waiting for the next market step"
    market_step(now=now - timedelta(minutes=1), rng=random.Random(1))

    body = _get(dlc, job_id)
    assert body.status == "Bidding"
    assert body.reason_code == "BidBelowMarketPrice"
    assert body.reason_message == "bid ¥0.32/h < market ¥0.50/h for ecs.g7.xlarge"
    listed = _listed(dlc, ws_a, job_id)
    assert (listed.reason_code, listed.reason_message) == (body.reason_code, body.reason_message)
    job = Job.objects.get(job_id=job_id)
    waiting_show(jobs=[job])
    assert waiting_text(job) == body.reason_message  # what the job page shows


def test_a_running_job_keeps_its_own_reason(dlc, create_job, ws_a):
    job_id = create_job(quota_job_body(ws_a))
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    body = _get(dlc, job_id)
    assert body.status == "Running"
    assert body.reason_message == Job.objects.get(job_id=job_id).reason_message
