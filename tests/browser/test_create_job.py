"""Creating jobs in a real Chromium: a spot job that lands in Bidding, a form that refuses
bad input beside each field, and role choices that follow the job type."""

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


def test_it_mounts_the_code_where_the_form_says_and_the_job_page_shows_it(
    browser_page, live_server, personas, password
):
    page = browser_page
    open_create_form(page, live_server, password)
    mount = page.locator("#id_code_source_mount_path")
    expect(mount).to_have_attribute("placeholder", "/root/code/")

    page.fill("#id_display_name", "code-mounted")
    page.fill("#id_user_command", "ls /workspace/code")
    page.fill("#id_code_source_uri", "https://git.local/bert.git")
    mount.fill("/workspace/code")
    page.check("input[name=resource_source][value=spot]")
    page.select_option("#id_roles-0-instance_type", "ecs.g7.xlarge")
    page.check("input[name=roles-0-spot_limit_type][value=discount]")
    page.select_option("#id_roles-0-spot_discount_limit", "0.4")
    page.click("#submit-job")

    expect(page.locator("h1")).to_contain_text("code-mounted")
    expect(page.locator("#code-mount-path")).to_have_text("/workspace/code")
    assert Job.objects.get().code_source["mount_path"] == "/workspace/code"


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


def test_it_offers_the_roles_of_the_chosen_job_type(browser_page, live_server, personas, password):
    page = browser_page
    open_create_form(page, live_server, password)
    rows = [page.locator(f"#id_roles-{row}-role_type") for row in range(4)]

    expect(rows[0].locator("option")).to_have_text(["Worker", "Master"])
    expect(rows[0]).to_have_value("Worker")
    expect(rows[1]).to_have_value("Master")
    expect(page.locator("#roles-2")).to_be_hidden()  # only a TFJob has more than two roles

    page.select_option("#id_job_type", "TFJob")
    expect(rows[0].locator("option")).to_have_text(["Worker", "PS", "Chief", "Evaluator"])
    for row, role in enumerate(["Worker", "PS", "Chief", "Evaluator"]):
        expect(rows[row]).to_have_value(role)
    expect(page.locator("#roles-2")).to_be_visible()
    expect(page.locator("#roles-3")).to_be_visible()

    page.select_option("#id_job_type", "MPIJob")
    expect(rows[1].locator("option")).to_have_text(["Launcher", "Worker"])
    expect(rows[0]).to_have_value("Worker")  # the type has it: the row keeps it
    expect(rows[1]).to_have_value("Launcher")
    expect(page.locator("#roles-2")).to_be_hidden()

    page.select_option("#id_job_type", "RayJob")
    expect(rows[0]).to_have_value("Worker")
    expect(rows[1]).to_have_value("Head")

    page.fill("#id_display_name", "ray-job")
    page.fill("#id_user_command", "python tune.py")
    page.fill("#id_roles-0-cpu_cores", "1")
    page.fill("#id_roles-0-memory_gib", "2")
    page.check("#id_roles-1-enabled")
    page.fill("#id_roles-1-cpu_cores", "1")
    page.fill("#id_roles-1-memory_gib", "2")
    page.click("#submit-job")

    expect(page.locator("h1")).to_contain_text("ray-job")
    job = Job.objects.get(display_name="ray-job")
    assert job.job_type == "RayJob"
    assert [role.role_type for role in job.roles.order_by("id")] == ["Worker", "Head"]
    assert page.external_requests == []


def test_a_reader_of_chinese_creates_a_spot_job_and_reads_why_it_waits(
    chromium_browser, live_server, personas, password, settings, tmp_path
):
    """The zh-CN console end to end: the form in Chinese, a spot job bid below the market,
    and its waiting reason in Chinese on its page (the market's words, translated)."""
    from datetime import timedelta
    from random import Random

    from django.utils import timezone

    from apps.market.services import market_step
    from tests.integration.test_market_step import replay_writer

    now = timezone.now()
    replay_writer(settings, tmp_path)([(now - timedelta(minutes=5), "ecs.g7.xlarge", "0.50")])
    context = chromium_browser.new_context(locale="zh-CN", timezone_id="Asia/Shanghai")
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        login(page, live_server, "alice", password)
        page.goto(f"{live_server.url}/jobs/new/")
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        expect(page.locator("label[for=id_display_name]")).to_contain_text("任务名称")
        expect(page.locator("#submit-job")).to_have_text("新建任务")

        page.fill("#id_display_name", "竞价-示例")
        page.fill("#id_user_command", "echo 你好 && sleep 30")
        page.check("input[name=resource_source][value=spot]")
        page.select_option("#id_roles-0-instance_type", "ecs.g7.xlarge")
        page.check("input[name=roles-0-spot_limit_type][value=discount]")
        page.select_option("#id_roles-0-spot_discount_limit", "0.4")  # ¥0.32/h
        page.click("#submit-job")
        expect(page.locator("h1")).to_contain_text("竞价-示例")
        expect(page.locator("#job-live")).to_contain_text("竞价中")

        job = Job.objects.get(display_name="竞价-示例")
        market_step(now=now - timedelta(minutes=1), rng=Random(1))
        page.reload()
        pending = page.locator("#pending")
        expect(pending).to_contain_text("出价 ¥0.32/h < ecs.g7.xlarge 的市场价格 ¥0.50/h")
        expect(pending).not_to_contain_text("bid ¥0.32/h")
        expect(page.locator("#events")).to_contain_text("由 alice 提交")
        assert Job.objects.get(pk=job.pk).status == "Bidding"
    finally:
        context.close()


def test_leaving_a_half_written_form_asks_first(browser_page, live_server, personas, password):
    """A switch of language (or workspace, or a link) while the create form holds what was
    typed asks before the page goes; dismissed, the form keeps it. Sending it asks nothing."""
    page = browser_page
    open_create_form(page, live_server, password)
    asked = []

    def answer(dialog):
        asked.append(dialog.type)
        dialog.dismiss()

    page.on("dialog", answer)
    page.goto(f"{live_server.url}/jobs/")  # nothing typed yet: it just goes
    assert asked == []
    page.go_back()
    page.fill("#id_display_name", "half-written")
    page.select_option("select[name=language]", "zh-hans")
    page.wait_for_timeout(500)
    assert asked == ["beforeunload"]
    expect(page.locator("#id_display_name")).to_have_value("half-written")

    page.fill("#id_user_command", "python train.py")
    page.click("#submit-job")  # sent: no question
    page.wait_for_load_state()
    assert asked == ["beforeunload"]
