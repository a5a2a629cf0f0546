"""What if in a real Chromium: staff paste a changed cluster file, run the cluster's own jobs
on it and read the comparison with the current configuration."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login
from tests.factories import make_user
from tests.web.test_whatif import BIGGER, history  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_staff_compare_a_changed_cluster_file(browser_page, live_server, history):  # noqa: F811
    make_user("ops", password="ops-password-1", superuser=True)
    page = browser_page
    login(page, live_server, "ops", "ops-password-1")
    page.get_by_role("link", name="What if").click()
    expect(page.get_by_role("heading", name="What if", level=1)).to_be_visible()

    cluster_file = page.locator("textarea[name=cluster_file]")
    expect(cluster_file).to_have_value(re.compile(r"\[quotas\.team-a\]"))  # the current one
    cluster_file.fill("")
    page.get_by_role("button", name="Run").click()  # emptied: refused, said why
    expect(page.locator("#field-cluster_file .error")).to_contain_text("required")

    page.fill("input[name=title]", "twice the GPUs")
    page.fill("textarea[name=cluster_file]", BIGGER)
    page.fill("input[name=policies]", "ours,kueue")
    page.get_by_role("button", name="Run").click()

    expect(page.get_by_role("heading", name="twice the GPUs")).to_be_visible()
    comparison = page.locator("#comparison")
    expect(comparison).to_be_visible()
    expect(comparison.locator("table[data-policy=ours]")).to_contain_text("GPU allocation")
    expect(comparison.locator("table[data-policy=kueue]")).to_contain_text("Preemptions")
    with page.expect_popup() as popup:
        comparison.get_by_role("link", name="changed").click()
    report = popup.value
    expect(report.locator("h1")).to_contain_text("Simulation: replay, 6 jobs on 4 nodes (32 GPUs)")
    assert page.external_requests == []


def test_the_comparison_fits_a_phone(browser_page, live_server, history):  # noqa: F811
    """On a 390 px phone the run's page was 395 px wide: its "All runs" button ran off it."""
    make_user("ops", password="ops-password-1", superuser=True)
    page = browser_page
    page.set_viewport_size({"width": 390, "height": 800})
    login(page, live_server, "ops", "ops-password-1")
    page.goto(f"{live_server.url}/whatif/")
    page.fill("textarea[name=cluster_file]", BIGGER)
    page.fill("input[name=policies]", "ours")
    page.get_by_role("button", name="Run").click()
    table = page.locator("#comparison table[data-policy=ours]")
    expect(table).to_contain_text("GPU allocation")

    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    button = page.get_by_role("link", name="All runs").bounding_box()
    assert button["x"] + button["width"] <= 390


def test_a_long_title_leaves_the_button_beside_it_whole(browser_page, live_server, history):  # noqa: F811
    """A 128-character title squeezed "All runs" into two lines, past the page's edge."""
    make_user("ops", password="ops-password-1", superuser=True)
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, live_server, "ops", "ops-password-1")
    page.goto(f"{live_server.url}/whatif/")
    page.fill("input[name=title]", ("容量规划-双倍GPU-ÄÖÜ-" * 10)[:128])
    page.fill("textarea[name=cluster_file]", BIGGER)
    page.fill("input[name=policies]", "ours")
    page.get_by_role("button", name="Run").click()
    expect(page.locator("#comparison table[data-policy=ours]")).to_be_visible()

    head = page.locator(".page-head").bounding_box()
    link = page.get_by_role("link", name="All runs")
    box = link.bounding_box()
    assert box["x"] + box["width"] <= head["x"] + head["width"], (box, head)
    assert link.evaluate("a => a.getClientRects().length") == 1
    assert box["height"] < 2 * float(link.evaluate("a => getComputedStyle(a).lineHeight")[:-2])
