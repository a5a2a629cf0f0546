"""The Content-Security-Policy in a real Chromium: markup that ever slipped past escaping
runs no script, and the console's own pages (htmx, charts, the create form's price
panel, the admin) break none of its rules."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login
from tests.web.test_jobs_views import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIOLATIONS = """() => {
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation",
        (event) => window.cspViolations.push(event.violatedDirective + " " + event.blockedURI));
}"""


def test_injected_markup_runs_no_script(browser_page, live_server, personas, password):
    page = browser_page
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/jobs/")
    page.evaluate(VIOLATIONS)
    page.evaluate(
        """() => {
        const box = document.createElement("div");
        box.innerHTML = '<img src="/static/img/favicon.svg" onload="window.ran = 1">'
            + '<button id="hx" hx-on:click="window.ran = 2">x</button>';
        document.body.append(box);
        htmx.process(box);
        const script = document.createElement("script");
        script.textContent = "window.ran = 3";
        document.body.append(script);
    }"""
    )
    page.click("#hx")
    page.wait_for_function("() => window.cspViolations.length >= 2")
    assert page.evaluate("() => window.ran") is None


def test_the_consoles_pages_break_none_of_its_rules(browser_page, live_server, personas, password):
    page = browser_page
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if "Content Security" in m.text else None)
    job = make_job(personas, name="charted", pods=1)
    page.goto(f"{live_server.url}/admin/login/")
    login(page, live_server, "alice", password)
    for path in (
        "/jobs/",
        f"/jobs/{job.job_id}/",
        "/market/",
        "/bills/",
        "/workspaces/preferences/",
    ):
        page.goto(f"{live_server.url}{path}")
        expect(page.locator("h1")).to_be_visible()
    page.goto(f"{live_server.url}/jobs/new/")
    page.check("input[name=resource_source][value=spot]")
    with page.expect_response(lambda r: "/market/price-panel/" in r.url):
        page.select_option("#id_roles-0-instance_type", "ecs.g7.xlarge")
    with page.expect_response(lambda r: "/market/price-panel/" in r.url):
        page.evaluate("() => htmx.trigger('#roles-0-market', 'price-tick')")
    page.goto(f"{live_server.url}/workspaces/access-keys/")
    page.fill("input[name=description]", "notebook")
    with page.expect_navigation():
        page.locator("form:has(input[name=description]) [type=submit]").click()
    page.focus("#new-key-secret")  # selected whole, to copy (an onfocus attribute did it)
    selected = """() => {
        const field = document.activeElement;
        return field.value.slice(field.selectionStart, field.selectionEnd);
    }"""
    assert page.evaluate(selected) == page.input_value("#new-key-secret") != ""
    assert errors == []
