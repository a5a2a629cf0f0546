"""A pod's log in a real Chromium: it opens at the newest line and follows new output until
the reader scrolls up; search shows only the matching lines, with their count."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.agent.logs import pod_log_path
from apps.jobs.models import Pod
from tests.browser.conftest import login
from tests.web.test_jobs_views import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _at_bottom(page) -> bool:
    return page.evaluate(
        "() => { const t = document.getElementById('log-text');"
        " return t.scrollHeight - t.scrollTop - t.clientHeight < 4; }"
    )


def test_the_log_follows_new_lines_and_search_filters_them(
    browser_page, live_server, personas, password, settings, tmp_path
):
    settings.POD_WORK_ROOT = tmp_path / "pods"
    job = make_job(personas, name="chatty", pods=2)
    pod = Pod.objects.filter(job=job).order_by("index").first()
    log = pod_log_path(pod)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(300)))
    page = browser_page
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/pods/{pod.pod_id}/logs/")
    expect(page.locator("#log-tools")).to_be_visible()
    expect(page.locator("#log-follow-toggle")).to_be_checked()
    assert _at_bottom(page)  # opens at the newest line
    with log.open("a") as out:  # new output arrives by the page's poll, and stays in view
        out.write("".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(300, 340)))
    expect(page.locator("#log-text")).to_contain_text("step 339 loss", timeout=10_000)
    page.wait_for_timeout(300)
    assert _at_bottom(page)
    page.evaluate("() => { document.getElementById('log-text').scrollTop = 0; }")
    expect(page.locator("#log-follow-toggle")).not_to_be_checked()  # the reader went up
    page.fill("#log-search", "step 33")
    # the page holds the last 200 lines and the 40 that followed
    expect(page.locator("#log-search-count")).to_contain_text("10 of 240 lines")
    expect(page.locator("#log-matches")).to_contain_text("step 339 loss")
    expect(page.locator("#log-text")).to_be_hidden()
    page.fill("#log-search", "")
    expect(page.locator("#log-text")).to_be_visible()
    page.screenshot(path=str(tmp_path / "pod-log.png"), full_page=True)
    expect(page.locator("#pod-switcher")).to_contain_text("Worker 1")
