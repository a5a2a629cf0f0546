"""What a job cost, through the API (paiweb's own call, signed as every call): the total so
far, the payType tag, and the bill lines per UTC day and pod, equal to what was billed."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from apps.billing.models import BillLine
from apps.billing.selectors import job_cost
from apps.billing.services import billing_accrue
from apps.jobs.models import Job
from apps.jobs.services import job_stop
from tests.api.conftest import RawClient
from tests.factories import submit_small_job
from tests.integration.test_market_step import G7, NOW, at, replay_writer, step, submit


@pytest.fixture(autouse=True)
def _prices(settings, tmp_path):
    replay_writer(settings, tmp_path)(
        [(NOW - timedelta(hours=1), G7, "0.30"), (at(1, 30), G7, "0.42")]
    )


def _cost(raw: RawClient, job: Job, **query) -> dict:
    response = raw.send("GET", f"/api/v1/jobs/{job.job_id}/cost", query=query or None)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_spot_jobs_cost_is_its_billed_minutes_at_the_prices_in_force(raw, personas):
    job = submit(personas, discount="0.9", pods=2)  # ¥0.72/h: survives the prices here
    step(at(0))
    step(at(1, 30))
    billing_accrue(now=at(3, 10))
    job_stop(job=job, by=personas["alice"], now=at(3, 10))
    billing_accrue(now=at(3, 20))

    body = _cost(raw, job)
    billed = BillLine.objects.filter(job=job)
    assert body["JobId"] == job.job_id
    assert (body["Prepaid"], body["PayType"], body["Currency"]) == (False, "spot", "CNY")
    assert body["Tag"] == "acs:pai:dlc:payType=spot"
    assert Decimal(body["Cost"]) == job_cost(job=job) > 0
    assert body["BilledMinutes"] == billed.count() == 8  # 2 pods × minutes 0–3
    assert body["TotalCount"] == len(body["Lines"]) == 2  # one day, two pods
    for line in body["Lines"]:
        mine = billed.filter(pod__pod_id=line["PodId"])
        assert line["Minutes"] == mine.count() == 4
        assert Decimal(line["Amount"]) == sum(b.amount for b in mine)
        assert (line["InstanceType"], line["PayType"]) == (G7, "spot")
        assert line["Tag"] == "acs:pai:dlc:payType=spot"
        assert (line["MinPricePerHour"], line["MaxPricePerHour"]) == ("0.3000", "0.4200")
        assert (line["StartTime"], line["EndTime"]) == (
            "2026-03-02T12:00:00Z",
            "2026-03-02T12:04:00Z",
        )
    assert sum(Decimal(line["Amount"]) for line in body["Lines"]) == Decimal(body["Cost"])

    page = _cost(raw, job, PageSize="1", PageNumber="2")
    assert (page["TotalCount"], page["PageNumber"], page["PageSize"]) == (2, 2, 1)
    assert page["Lines"] == body["Lines"][1:]


def test_a_quota_job_is_prepaid_and_costs_nothing_here(raw, personas):
    job = submit_small_job(personas, "prepaid")
    body = _cost(raw, job)
    assert (body["Prepaid"], body["PayType"], body["Tag"]) == (True, None, None)
    assert (body["Cost"], body["BilledMinutes"], body["Lines"]) == ("0.000000", 0, [])


def test_another_workspaces_job_has_no_cost_to_show(live_server, keys, personas):
    job = submit(personas, discount="0.9", ws="ws_b", user="charlie")
    response = RawClient(live_server.url, keys["alice"]).send(
        "GET", f"/api/v1/jobs/{job.job_id}/cost"
    )
    assert (response.status_code, response.json()["Code"]) == (404, "EntityNotExist.Job")
