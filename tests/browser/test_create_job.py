"""Creating jobs in a real Chromium: a spot job that lands in Bidding, and a form that
refuses bad input beside each field."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.jobs.models import Job
from tests.browser.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def open_create_form(page, live_server, password):
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/new/")
    expect(page.locator("#submit-job")).to_be_visible()


def test_it_submits_a_spot_job_that_waits_in_bidding(browser_page, live_server, personas, password):
    page = browser_page
    open_create_form(page, live_server, password)

    page.fill("#id_display_name", "sample-spot-job")
    page.fill("#id_user_command", "echo 'Hello World' && sleep 30 && echo 'DONE'")
    page.check("input[name=resource_source][value=spot]")
    page.select_option("#id_roles-0-instance_type", "ecs.g7.xlarge")
    page.check("input[name=roles-0-spot_limit_type][value=discount]")
    page.select_option("#id_roles-0-spot_discount_limit", "0.4")
    page.click("#submit-job")

    expect(page.locator("h1")).to_contain_text("sample-spot-job")
    expect(page.locator("#job-live")).to_contain_text("Bidding")
    job = Job.objects.get(display_name="sample-spot-job")
    assert page.url.endswith(f"/jobs/{job.job_id}/")
    assert job.status == "Bidding"
    role = job.roles.get()
    assert (role.instance_type.name, str(role.spot_discount_limit)) == ("ecs.g7.xlarge", "0.40")
    assert page.external_requests == []


def test_it_shows_field_errors_and_saves_nothing(browser_page, live_server, personas, password):
    page = browser_page
    open_create_form(page, live_server, password)

    page.fill("#id_display_name", "")
    page.fill("#id_user_command", "")
    page.check("input[name=resource_source][value=spot]")
    page.select_option("#id_roles-0-instance_type", "ecs.g7.xlarge")
    page.check("input[name=roles-0-spot_limit_type][value=price]")
    page.fill("#id_roles-0-spot_price_limit", "5")  # far above ¥0.80/h = ¥0.013/min
    page.click("#submit-job")

    expect(page.locator("#form-errors")).to_be_visible()
    expect(page.locator("#id_display_name_error")).to_contain_text("required")
    expect(page.locator("#id_user_command_error")).to_contain_text("required")
    expect(page.locator("#id_roles-0-spot_price_limit_error")).to_contain_text(
        re.compile("market price range")
    )
    assert Job.objects.count() == 0
    # the summary takes the focus and names each problem; its links put the cursor there
    expect(page.locator("#form-errors")).to_be_focused()
    summary = page.locator("#error-summary")
    expect(summary).to_contain_text("Display name: is required")
    expect(summary).to_contain_text("Role 1: SpotPriceLimit")
    summary.locator("a[data-focus='id_roles-0-spot_price_limit']").click()
    expect(page.locator("#id_roles-0-spot_price_limit")).to_be_focused()
    expect(page.locator("label[for=id_display_name] .req")).to_have_text("required")
