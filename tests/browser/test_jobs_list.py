"""The job list in a real Chromium: a status change shows up by the list's own poll, without
a reload; Clone opens the create form filled in from the job, which submits as a new job."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.jobs.models import Job, JobRole, JobStatus, Pod, PodStatus
from tests.browser.conftest import login
from tests.web.test_jobs_views import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POLL_WAIT_MS = 12_000  # the list polls every 5 s


def is_poll(response) -> bool:
    headers = response.request.headers
    return headers.get("hx-target") == "job-table" and "if-none-match" in headers


def test_it_shows_a_preemption_without_a_reload(
    browser_page, live_server, personas, password, tmp_path
):
    page = browser_page
    job = make_job(personas, name="borrower-job", idle_mode="acceptable", pods=2)
    Pod.objects.filter(job=job, index=1).update(in_quota=False)
    make_job(personas, name="steady-job", status=JobStatus.SUCCEEDED)
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/?sort=name")
    row = page.locator(f"#job-{job.job_id}")
    expect(row.locator(".job-status")).to_contain_text("Running")
    expect(row.locator(".job-pods")).to_contain_text("1 / 1")
    page.screenshot(path=str(tmp_path / "jobs-list.png"), full_page=True)
    page.evaluate("() => { window.notReloaded = true; }")
    running = row.locator(".job-running")
    shown = running.inner_text()
    expect(running).not_to_have_text(shown, timeout=3_000)  # the clock counts between polls
    row.locator("input[name=job_ids]").check()
    with page.expect_response(is_poll, timeout=POLL_WAIT_MS) as unchanged:
        pass
    assert unchanged.value.status == 204  # nothing changed: nothing sent, nothing swapped

    # The scheduler preempts the borrower: its pods end Preempted and it queues again.
    Pod.objects.filter(job=job).update(status=PodStatus.PREEMPTED)
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.QUEUING, attempt=1, status_changed_at=timezone.now() + timedelta(seconds=1)
    )
    expect(row.locator(".job-status")).to_contain_text("Queuing", timeout=POLL_WAIT_MS)
    expect(row.locator(".job-pods")).to_contain_text("0 / 0")
    assert page.evaluate("() => window.notReloaded === true"), "the page was reloaded"
    assert page.url.endswith("/jobs/?sort=name")  # the order survived the poll
    expect(page.locator("th[aria-sort=ascending]")).to_contain_text("Name")
    expect(row.locator("input[name=job_ids]")).to_be_checked()  # kept across the swap
    page.screenshot(path=str(tmp_path / "jobs-list-preempted.png"), full_page=True)

    # A filter chosen now keeps the order: it travels with the filter form.
    page.select_option("#id_status", "Queuing")
    expect(page.locator("#job-table")).not_to_contain_text("steady-job")
    query = parse_qs(urlsplit(page.url).query)
    assert (query["status"], query["sort"]) == (["Queuing"], ["name"])
    assert page.external_requests == []


def test_it_clones_a_job_into_a_filled_form_and_submits_it(
    browser_page, live_server, personas, password, tmp_path
):
    page = browser_page
    job = make_job(personas, name="resnet", status=JobStatus.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(
        image="registry.local/pytorch:2.3", envs={"SEED": "7"}, enable_aimaster=True
    )
    JobRole.objects.filter(job=job).update(pod_count=2, gpu=1)
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/")
    page.locator(f"#job-{job.job_id}").get_by_role("link", name="Clone").click()

    expect(page.locator("#cloned-from")).to_contain_text("resnet")
    expect(page.locator("#id_display_name")).to_have_value("resnet-copy")
    expect(page.locator("#id_user_command")).to_have_value("python train.py")
    expect(page.locator("#id_image")).to_have_value("registry.local/pytorch:2.3")
    expect(page.locator("#id_envs")).to_have_value("SEED=7")
    expect(page.locator("input[name=resource_source][value=quota]")).to_be_checked()
    expect(page.locator("#id_quota")).to_have_value("team-a")
    expect(page.locator("#id_roles-0-pod_count")).to_have_value("2")
    expect(page.locator("#id_roles-0-cpu_cores")).to_have_value("4")
    expect(page.locator("#id_roles-0-memory_gib")).to_have_value("16")
    expect(page.locator("#id_roles-0-gpus")).to_have_value("1")
    expect(page.locator("#id_enable_aimaster")).to_be_checked()
    page.screenshot(path=str(tmp_path / "clone-form.png"), full_page=True)
    page.click("#submit-job")

    expect(page.locator("h1")).to_contain_text("resnet-copy")
    copy = Job.objects.get(display_name="resnet-copy")
    assert page.url.endswith(f"/jobs/{copy.job_id}/")
    assert (copy.image, copy.envs, copy.enable_aimaster) == (
        "registry.local/pytorch:2.3",
        {"SEED": "7"},
        True,
    )
    role = copy.roles.get()
    assert (role.pod_count, role.cpu, role.memory, role.gpu) == (2, 4000, 16384, 1)
    assert copy.quota.name == "team-a"
    assert page.external_requests == []


def test_it_saves_a_job_as_a_template_and_creates_a_job_from_it(
    browser_page, live_server, personas, password, tmp_path
):
    page = browser_page
    job = make_job(personas, name="bert", status=JobStatus.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(envs={"EPOCHS": "3"}, enable_easyckpt=True)
    JobRole.objects.filter(job=job).update(pod_count=3, gpu=2)
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/{job.job_id}/")
    page.locator("#save-template summary").click()
    page.fill("#template-name", "bert-3x2")
    page.click("#save-template-submit")

    expect(page.locator("#templates")).to_contain_text("bert-3x2")
    expect(page.locator("#templates")).to_contain_text("Worker ×3")
    page.screenshot(path=str(tmp_path / "templates.png"), full_page=True)
    page.locator("#templates").get_by_role("link", name="Use").click()
    expect(page.locator("#from-template")).to_contain_text("bert-3x2")
    expect(page.locator("#id_display_name")).to_have_value("bert")
    expect(page.locator("#id_envs")).to_have_value("EPOCHS=3")
    expect(page.locator("#id_roles-0-pod_count")).to_have_value("3")
    expect(page.locator("#id_roles-0-gpus")).to_have_value("2")
    expect(page.locator("#id_enable_easyckpt")).to_be_checked()
    page.fill("#id_display_name", "bert-again")
    page.click("#submit-job")

    expect(page.locator("h1")).to_contain_text("bert-again")
    made = Job.objects.get(display_name="bert-again")
    assert (made.envs, made.enable_easyckpt, made.roles.get().pod_count) == (
        {"EPOCHS": "3"},
        True,
        3,
    )
    assert page.external_requests == []


def test_back_and_forward_show_the_filters_of_the_list_they_bring_back(
    browser_page, live_server, personas, password
):
    """Back from a list filtered by Succeeded (htmx's history) showed that list under "Any
    status", and Back to the unfiltered list showed it under the last filter typed."""
    page = browser_page
    make_job(personas, name="done-job", status=JobStatus.SUCCEEDED)
    make_job(personas, name="failed-job", status=JobStatus.FAILED)
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/")
    status = page.locator("#job-filters select[name=status]")
    status.select_option("Succeeded")
    expect(page).to_have_url(re.compile("status=Succeeded"))
    status.select_option("Failed")
    expect(page).to_have_url(re.compile("status=Failed"))
    expect(page.locator("#job-table")).not_to_contain_text("done-job")

    page.go_back()
    expect(page).to_have_url(re.compile("status=Succeeded"))
    expect(page.locator("#job-table")).to_contain_text("done-job")
    expect(status).to_have_value("Succeeded")
    page.go_back()
    expect(page.locator("#job-table")).to_contain_text("failed-job")
    expect(status).to_have_value("")
    page.go_forward()
    expect(status).to_have_value("Succeeded")


def test_a_switch_in_another_tab_reloads_the_list_with_its_header(
    browser_page, live_server, personas, alice, password
):
    """Tab one switches to team-b; tab two's list, on its next poll, showed team-b's jobs
    under team-a's header. It reloads whole instead, header and list of team-b."""
    from apps.workspaces.models import Membership

    Membership.objects.create(user=alice, workspace=personas["ws_b"], role="member")
    make_job(personas, name="a-job-of-team-a")
    make_job(personas, name="a-job-of-team-b", workspace="ws_b", user="charlie", source="public")
    other = browser_page
    login(other, live_server, "alice", password)
    other.goto(f"{live_server.url}/jobs/")
    expect(other.locator("#job-table")).to_contain_text("a-job-of-team-a")
    switcher = other.locator("#workspace-switch")
    team_a = switcher.input_value()

    page = other.context.new_page()
    page.goto(f"{live_server.url}/jobs/")
    with page.expect_navigation():
        page.locator("#workspace-switch").select_option(str(personas["ws_b"].pk))

    expect(switcher).not_to_have_value(team_a, timeout=15_000)  # reloaded by its poll
    expect(other.locator("#job-table")).to_contain_text("a-job-of-team-b")
    expect(other.locator("#job-table")).not_to_contain_text("a-job-of-team-a")
