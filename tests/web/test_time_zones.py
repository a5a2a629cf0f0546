"""Times in the reader's zone: the one they saved, else their browser's (the cookie the
page's script sets), else the server's; one 24-hour format, the zone named in the header."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from apps.jobs.models import Job
from apps.workspaces.models import UserPreference
from tests.factories import submit_small_job

pytestmark = pytest.mark.django_db

CREATED = datetime(2026, 12, 1, 11, 10, 10, tzinfo=UTC)


@pytest.fixture
def job(personas) -> Job:
    job = submit_small_job(personas, "tz-job")
    Job.objects.filter(pk=job.pk).update(created_at=CREATED)
    return job


def detail(client, job: Job) -> str:
    return html.unescape(client.get(reverse("jobs:detail", args=[job.job_id])).content.decode())


def test_it_shows_times_in_the_browsers_zone(alice_client, job):
    alice_client.cookies["paiweb_tz"] = "Asia/Shanghai"
    page = detail(alice_client, job)
    assert '<time datetime="2026-12-01T11:10:10+00:00"' in page
    assert ">2026-12-01 19:10:10</time>" in page and 'title="2026-12-01 19:10:10 CST"' in page
    assert "Asia/Shanghai (UTC+08:00)" in page  # the header names the zone
    assert 'data-tz="Asia/Shanghai" data-tz-source="browser"' in page


def test_without_a_zone_it_shows_the_servers_and_says_so(alice_client, job):
    page = detail(alice_client, job)
    assert ">2026-12-01 11:10:10</time>" in page and "UTC (UTC+00:00)" in page
    assert 'data-tz-source="server"' in page


def test_a_saved_zone_wins_over_the_browsers_and_is_remembered(client, personas, job):
    client.force_login(personas["alice"])
    response = client.post(reverse("workspaces:preferences"), {"time_zone": "America/New_York"})
    assert response.status_code == 302
    assert UserPreference.objects.get(user=personas["alice"]).time_zone == "America/New_York"
    client.cookies["paiweb_tz"] = "Asia/Shanghai"
    assert ">2026-12-01 06:10:10</time>" in detail(client, job)
    client.logout()
    client.force_login(personas["alice"])  # a new session reads it again
    page = detail(client, job)
    assert ">2026-12-01 06:10:10</time>" in page and "America/New_York (UTC-05:00)" in page


def test_following_the_browser_again_forgets_the_saved_zone(alice_client, personas, job):
    UserPreference.objects.create(user=personas["alice"], time_zone="Europe/Berlin")
    alice_client.post(reverse("workspaces:preferences"), {"time_zone": ""})
    alice_client.cookies["paiweb_tz"] = "Asia/Shanghai"
    assert ">2026-12-01 19:10:10</time>" in detail(alice_client, job)


@pytest.mark.parametrize("bad", ["Mars/Olympus", "../../etc/passwd", "x" * 300])
def test_it_refuses_a_zone_that_does_not_exist(alice_client, personas, job, bad):
    response = alice_client.post(reverse("workspaces:preferences"), {"time_zone": bad}, follow=True)
    assert "is not a time zone name" in html.unescape(response.content.decode())
    assert not UserPreference.objects.filter(user=personas["alice"]).exclude(time_zone="").exists()
    alice_client.cookies["paiweb_tz"] = bad  # a made-up cookie is no zone either
    assert ">2026-12-01 11:10:10</time>" in detail(alice_client, job)
