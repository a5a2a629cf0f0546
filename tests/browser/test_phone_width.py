"""Every console page on a 375 px phone: the page itself never scrolls sideways (a wide table
scrolls inside its own box, a form's fields stack), in English and in Chinese, with the long
names and Unicode that tables hold."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.agent.logs import pod_log_path
from apps.jobs.models import Pod
from apps.workspaces.models import Membership
from tests.browser.conftest import login
from tests.factories import make_user
from tests.web.test_bills_pages import billed  # noqa: F401 (the fixture)
from tests.web.test_jobs_views import make_job
from tests.web.test_whatif import BIGGER, history  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 375, "height": 740}
LONG = "训练-" + "a-very-long-unicode-name-ÄÖÜ-数据并行-" * 6


@pytest.fixture
def pages(personas, billed, history, settings, tmp_path):  # noqa: F811
    settings.POD_WORK_ROOT = tmp_path / "pods"
    job = make_job(personas, name=LONG, pods=2)
    pod = Pod.objects.filter(job=job).order_by("index").first()
    log = pod_log_path(pod)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"step {i} " + "x" * 300 + "\n" for i in range(50)))
    quota = personas["ws_a"].quotas.get(name="team-a")
    return [
        reverse("jobs:list"),
        reverse("jobs:create"),
        reverse("jobs:detail", args=[job.job_id]),
        reverse("jobs:templates"),
        reverse("scheduler:quotas"),
        reverse("scheduler:quota", args=[quota.name]),
        reverse("market:index"),
        reverse("billing:index"),
        reverse("ops:health"),
        reverse("whatif:index"),
        reverse("workspaces:preferences"),
        reverse("workspaces:password"),
        reverse("workspaces:access-keys"),
        reverse("pods:logs", args=[pod.pod_id]),
    ]


def _too_wide(page, live_server, urls) -> list[tuple[str, int]]:
    wide = []
    for url in urls:
        page.goto(f"{live_server.url}{url}")
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.scrollingElement.scrollWidth")
        if width > page.evaluate("window.innerWidth"):
            wide.append((url, width))
    return wide


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_no_page_scrolls_sideways_on_a_phone(browser_page, live_server, personas, pages, language):
    ops = make_user("ops", password="ops-password-1", superuser=True)
    Membership.objects.create(user=ops, workspace=personas["ws_a"], role="owner")
    page = browser_page
    login(page, live_server, "ops", "ops-password-1")
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}{reverse('workspaces:preferences')}")
    with page.expect_navigation():  # the switch reloads the page: the next goto waits for it
        page.select_option("#language-switch", language)  # the header's switcher
    page.goto(f"{live_server.url}{reverse('whatif:index')}")
    page.fill("textarea[name=cluster_file]", BIGGER)
    page.fill("input[name=policies]", "ours,kueue")
    page.locator("#whatif-form [type=submit]").click()
    expect(page.locator("#comparison table[data-policy=ours]")).to_be_visible()
    run = page.url.removeprefix(live_server.url)

    assert _too_wide(page, live_server, [*pages, run]) == []
    assert page.external_requests == []
