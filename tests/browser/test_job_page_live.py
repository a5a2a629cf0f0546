"""The job page's own poll (every 3 s) in a real Chromium: it must not undo what the reader
is doing in the page's forms."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.jobs.models import Job, JobStatus
from tests.browser.conftest import login
from tests.web.test_jobs_views import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_poll_keeps_an_open_form_and_what_was_typed(
    browser_page, live_server, personas, password
):
    """Save as template closed, its name back to the job's, every 3 s on a running job; and
    a priority picked but not yet sent went back to the old one, which Change then sent."""
    page = browser_page
    job = make_job(personas, name="queued-job", status=JobStatus.QUEUING)
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    page.locator("#save-template summary").click()
    page.locator("#template-name").fill("my-base")
    page.locator("#priority-select").select_option("7")
    page.evaluate("() => { window.notReloaded = true; }")

    # the scheduler dequeues it: the poll brings the new status in
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.ENV_PREPARING, status_changed_at=timezone.now()
    )
    expect(page.locator("#job-live .status-main")).to_contain_text("EnvPreparing", timeout=10_000)

    assert page.evaluate("() => window.notReloaded === true")
    expect(page.locator("#save-template")).to_have_attribute("open", "")
    expect(page.locator("#template-name")).to_have_value("my-base")
    expect(page.locator("#priority-select")).to_have_value("7")
    page.locator("#change-priority").click()
    expect(page.locator("#priority-select")).to_have_value("7")
    job.refresh_from_db()
    assert job.priority == 7


def test_the_poll_keeps_the_text_being_selected(browser_page, live_server, personas, password):
    """Text selected in the job page (an event's message, to copy it) was dropped by the
    page's poll every 3 s; the poll waits until the selection ends."""
    page = browser_page
    job = make_job(personas, name="queued-job", status=JobStatus.QUEUING)
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    page.evaluate(
        """() => { const range = document.createRange();
                   range.selectNodeContents(document.querySelector('#job-live .status-main'));
                   getSelection().removeAllRanges(); getSelection().addRange(range); }"""
    )
    selected = page.evaluate("() => getSelection().toString()")
    assert selected.strip()

    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.ENV_PREPARING, status_changed_at=timezone.now()
    )
    page.wait_for_timeout(7_000)  # two polls

    assert page.evaluate("() => getSelection().toString()") == selected
    page.evaluate("() => getSelection().removeAllRanges()")
    expect(page.locator("#job-live .status-main")).to_contain_text("EnvPreparing", timeout=10_000)


def test_a_poll_that_cannot_reach_the_server_says_so(browser_page, live_server, personas, password):
    """With the server gone, the job page's polls failed in silence: a Running job stayed
    Running on the page with nothing to say it was out of date."""
    page = browser_page
    job = make_job(personas, name="running-job")
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    notice = page.locator("#connection-lost")
    expect(notice).to_be_hidden()

    def gone(route):
        if route.request.headers.get("hx-request"):
            route.abort()
        else:
            route.continue_()

    page.route("**/jobs/**", gone)
    expect(notice).to_be_visible(timeout=10_000)
    page.unroute("**/jobs/**", gone)
    expect(notice).to_be_hidden(timeout=10_000)
