"""The API's messages in the caller's language, through the official SDK: a request that sends
Accept-Language: zh-CN gets its reasons, events and errors in Chinese (the console's words);
codes, statuses and field names stay as DLC spells them, and a request without the header is
answered in English."""

from __future__ import annotations

import random
from datetime import timedelta

import alibabacloud_pai_dlc20201203.client as dlc_client
import pytest
from alibabacloud_pai_dlc20201203.models import (
    CreateJobRequest,
    GetJobEventsRequest,
    GetJobRequest,
    ListJobsRequest,
)
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job
from apps.market.services import market_step
from apps.scheduler.services import scheduler_tick
from tests.api.conftest import quota_job_body, sdk_error, spot_job_body
from tests.api.test_waiting import EIGHT_GPUS
from tests.integration.test_market_step import replay_writer

# the runtime options type the installed SDK's client takes (darabonba's, or tea-util's)
RuntimeOptions = (
    getattr(dlc_client, "RuntimeOptions", None) or dlc_client.util_models.RuntimeOptions
)
CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9"}


def _get(dlc, job_id, headers=None):
    return dlc.get_job_with_options(job_id, GetJobRequest(), headers or {}, RuntimeOptions()).body


def test_a_waiting_job_says_why_in_the_callers_language(dlc, create_job, ws_a, alice_client):
    ids = [
        create_job(quota_job_body(ws_a, DisplayName=f"big-{i}", JobSpecs=EIGHT_GPUS))
        for i in range(3)
    ]
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    third = ids[2]

    english, chinese = _get(dlc, third), _get(dlc, third, CHINESE)
    assert english.reason_message.endswith("position 2 of 2 in the queue of quota team-a")
    assert chinese.reason_message.endswith("在配额 team-a 的队列中排第 2 位，共 2 个")
    assert chinese.reason_message.startswith("被 big-1 (")  # blocked behind it (StrictFIFO)
    assert (chinese.status, chinese.reason_code) == (english.status, english.reason_code)
    listed = dlc.list_jobs_with_options(
        ListJobsRequest(workspace_id=ws_a, page_size=50), CHINESE, RuntimeOptions()
    ).body.jobs
    assert next(j for j in listed if j.job_id == third).reason_message == chinese.reason_message
    # the console says the same to a reader of Chinese
    page = alice_client.get(
        reverse("jobs:detail", args=[third]), headers={"accept_language": "zh-CN"}
    )
    assert chinese.reason_message in page.content.decode()


def test_a_spot_job_below_the_market_gives_its_bid_and_the_price_in_chinese(
    dlc, create_job, ws_a, settings, tmp_path
):
    now = timezone.now()
    replay_writer(settings, tmp_path)([(now - timedelta(minutes=5), "ecs.g7.xlarge", "0.50")])
    job_id = create_job(spot_job_body(ws_a))  # SpotDiscountLimit 0.4 of ¥0.80/h: ¥0.32/h
    assert _get(dlc, job_id, CHINESE).reason_message == "等待下一次市场撮合"
    market_step(now=now - timedelta(minutes=1), rng=random.Random(1))

    body = _get(dlc, job_id, CHINESE)
    assert body.reason_code == "BidBelowMarketPrice"
    assert body.reason_message == "出价 ¥0.32/h < ecs.g7.xlarge 的市场价格 ¥0.50/h"
    assert _get(dlc, job_id).reason_message == "bid ¥0.32/h < market ¥0.50/h for ecs.g7.xlarge"


def test_a_jobs_events_read_in_chinese(dlc, create_job, ws_a):
    job_id = create_job(quota_job_body(ws_a, Settings={"EnableRDMA": True}))
    Job.objects.filter(job_id=job_id).update(status="Queuing")
    events = dlc.get_job_events_with_options(
        job_id, GetJobEventsRequest(), CHINESE, RuntimeOptions()
    ).body.events
    assert any(line.endswith("Submitted: 由 alice 提交") for line in events), events
    [note] = [line for line in events if "FieldIgnored" in line]
    assert note.endswith(
        "Settings.EnableRDMA 已接受但不起作用：此集群没有 RDMA 网络：Pod 将在没有它的情况下运行"
    )
    english = dlc.get_job_events_with_options(
        job_id, GetJobEventsRequest(), {}, RuntimeOptions()
    ).body.events
    assert any(line.endswith("Submitted: Submitted by alice") for line in english), english


def test_a_refused_job_is_explained_in_chinese_with_the_dlc_names_and_code(dlc, ws_a):
    body = quota_job_body(ws_a, DisplayName="", Priority=12)
    with pytest.raises(Exception) as caught:
        dlc.create_job_with_options(CreateJobRequest().from_map(body), CHINESE, RuntimeOptions())
    assert sdk_error(caught) == ("InvalidParameter", 400)
    message = str(caught.value)
    assert "DisplayName：必填" in message
    assert "Priority：必须是 1 到 9 之间的整数" in message
    assert "is required" not in message


def test_an_unknown_job_is_not_found_in_either_language(dlc):
    with pytest.raises(Exception) as caught:
        _get(dlc, "dlc-nosuchjob", CHINESE)
    assert sdk_error(caught) == ("EntityNotExist.Job", 404)
    assert "任务 'dlc-nosuchjob' 不存在" in str(caught.value)  # the entity in words too
    with pytest.raises(Exception) as caught:
        _get(dlc, "dlc-nosuchjob", {})
    assert "The job 'dlc-nosuchjob' does not exist." in str(caught.value)


def test_a_missing_template_is_named_in_words(raw):
    response = raw.send("GET", "/api/v1/jobtemplates/9")
    assert (response.status_code, response.json()["Code"]) == (404, "EntityNotExist.JobTemplate")
    assert response.json()["Message"] == "The job template '9' does not exist."


def test_a_refused_stop_says_who_may_in_chinese(dlc_for, create_job, ws_a):
    job_id = create_job(quota_job_body(ws_a))  # alice's; bob is a member of her workspace
    with pytest.raises(Exception) as caught:
        dlc_for("bob").stop_job_with_options(job_id, CHINESE, RuntimeOptions())
    assert sdk_error(caught) == ("Forbidden.NotJobManager", 403)
    assert f"你不能停止任务 {job_id}：只有提交它的用户" in str(caught.value)
