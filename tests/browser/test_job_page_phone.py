"""The job page on a phone: its tables become one card per row, each cell under its
column's name, and nothing widens the page."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.jobs.models import Checkpoint, JobEvent
from tests.browser.conftest import login
from tests.web.test_jobs_views import make_job

PHONE = {"width": 390, "height": 844}


def _job(personas):
    job = make_job(personas, name="phone", pods=2)
    now = timezone.now()
    for kind in ("Submitted", "Scheduled", "PodStarted"):
        message = f"{kind}: " + "a long message that would run far past a phone's width " * 2
        JobEvent.objects.create(job=job, kind=kind, message=message, at=now)
    path = f"/var/lib/paiweb/pods/{job.job_id}/checkpoints/ckpt-000000001200.pkl"
    Checkpoint.objects.create(job=job, step=1200, path=path, size_bytes=4096, created_at=now)
    return job


def test_the_job_pages_tables_become_cards_on_a_phone(
    browser_page, live_server, personas, password
):
    page = browser_page
    job = _job(personas)
    login(page, live_server, "alice", password)
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}{reverse('jobs:detail', args=[job.job_id])}")
    events = page.locator("#events table")
    expect(events.locator("thead")).to_be_hidden()
    first = events.locator("tbody tr").first
    expect(first.locator("td").first).to_have_attribute("data-label", "Time")
    labels = first.locator("td").evaluate_all(
        "tds => tds.map(td => getComputedStyle(td, '::before').content)"
    )
    assert labels == ['"Time"', '"Kind"', '"Pod"', '"Message"']
    box = first.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    step = page.locator("#checkpoints tbody td").first
    expect(step).to_have_attribute("data-label", "Step")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.external_requests == []

    page.set_viewport_size({"width": 1280, "height": 900})  # a desktop keeps the table
    expect(events.locator("thead")).to_be_visible()
    assert first.locator("td").first.evaluate("td => getComputedStyle(td).display") == (
        "table-cell"
    )


def test_the_lists_scroll_inside_their_table_on_a_phone(
    browser_page, live_server, personas, password
):
    # a visually hidden column label is positioned absolutely: it must not widen the page
    page = browser_page
    for i in range(3):
        make_job(personas, name=f"a-rather-long-job-name-{i}", pods=2)
    login(page, live_server, "alice", password)
    page.set_viewport_size(PHONE)
    for url in (reverse("jobs:list"), reverse("jobs:templates"), reverse("scheduler:quotas")):
        page.goto(f"{live_server.url}{url}")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], (url, width)
    assert page.external_requests == []


def test_a_long_word_breaks_instead_of_pushing_columns_out_of_view(
    browser_page, live_server, personas, password
):
    """A 256-character name, a 400-character image, a long tag, template name and key
    description: each breaks within its place; every table's last column stays in view on a
    desktop, and no page grows wider than a phone."""
    from apps.jobs.models import JobTag
    from apps.jobs.services import template_save
    from apps.jobs.specs import JobSpec, RoleSpec
    from tests.factories import make_access_key

    page = browser_page
    job = make_job(personas, name="n" * 256)
    job.image = "registry.local/" + "i" * 400 + ":1"
    job.save(update_fields=["image"])
    JobTag.objects.create(job=job, key="longtag", value="t" * 120)
    spec = JobSpec(
        display_name="t",
        user_command="true",
        quota="team-a",
        roles=[RoleSpec(cpu=1000, memory=1024)],
    )
    template_save(workspace=job.workspace, user=personas["alice"], name="T" * 128, spec=spec)
    key, _ = make_access_key(personas["alice"])
    key.description = "d" * 200
    key.save(update_fields=["description"])
    login(page, live_server, "alice", password)
    pages = {
        reverse("jobs:list"): "#job-table tbody tr td:last-child .btn",
        reverse("jobs:detail", args=[job.job_id]): "#stop-job",
        reverse("jobs:templates"): "tbody tr td:last-child .btn",
        reverse("workspaces:access-keys"): "tbody tr td:last-child .btn",
    }
    for size in ({"width": 1280, "height": 900}, PHONE):
        page.set_viewport_size(size)
        for url, last in pages.items():
            page.goto(f"{live_server.url}{url}")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= size["width"], (url, size, width)
            if size == PHONE and url != reverse("jobs:detail", args=[job.job_id]):
                continue  # a phone scrolls a list inside its table
            box = page.locator(last).first.bounding_box()
            assert box is not None and box["x"] + box["width"] <= size["width"], (url, size, box)
    assert page.external_requests == []


def test_the_pod_table_fits_a_desktop(browser_page, live_server, personas, password):
    """At 1280 px a finished pod's table was 1,241 px in a 997 px card: Exit code and Reason
    ("Exit co" cut at the edge) were behind a sideways scroll."""
    from datetime import timedelta

    from apps.cluster.models import Node

    job = make_job(personas, name="done-job", status="Succeeded", pods=1)
    now = timezone.now()
    job.pods.update(
        status="Succeeded",
        node=Node.objects.first(),
        gpu_ids="6,7",
        finished_at=now + timedelta(minutes=1),
        exit_code=0,
        reason="Completed",
        message="Exited with code 0",
    )
    page = browser_page
    login(page, live_server, "alice", password)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}{reverse('jobs:detail', args=[job.job_id])}")
    table = page.locator("#pods table.pod-table")
    expect(table).to_contain_text("Exited with code 0")

    widths = table.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
    assert widths[0] <= widths[1], widths
