"""Smoke tests in a real Chromium: the login page, its styles, and signing in."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from tests.browser.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What an author's stylesheet is bound to change on a page: the body's box, font and colours.
COMPUTED_STYLE = """() => {
    const style = getComputedStyle(document.body);
    return [style.margin, style.fontFamily, style.fontSize, style.color,
            style.backgroundColor, style.lineHeight].join(" | ");
}"""
LINKED_SHEETS = """() => [...document.styleSheets].filter(s => s.href).map(
    s => ({href: s.href, rules: s.cssRules.length}))"""


def test_it_serves_the_login_page_with_its_own_css(browser_page, live_server):
    response = browser_page.goto(f"{live_server.url}/login/")

    assert response.status == 200
    sheets = browser_page.evaluate(LINKED_SHEETS)
    assert sheets, "the login page links no stylesheet"
    for sheet in sheets:
        assert sheet["href"].startswith(f"{live_server.url}/static/"), sheet
        assert sheet["rules"] > 0, f"{sheet['href']} was served empty or not as CSS"
    styled = browser_page.evaluate(COMPUTED_STYLE)
    browser_page.evaluate("() => { for (const s of document.styleSheets) s.disabled = true; }")
    assert browser_page.evaluate(COMPUTED_STYLE) != styled, "the stylesheets change nothing"
    assert browser_page.external_requests == []


def test_it_shows_an_error_for_a_wrong_password(browser_page, live_server, alice):
    login(browser_page, live_server, "alice", "not-the-password")

    assert urlsplit(browser_page.url).path == "/login/"
    expect(browser_page.get_by_text(re.compile("correct username and password"))).to_be_visible()
    assert browser_page.external_requests == []


@pytest.mark.parametrize("username", ["alice", "bob", "charlie"])
def test_it_lands_a_persona_on_the_jobs_list(
    browser_page, live_server, personas, password, username
):
    response = login(browser_page, live_server, username, password)

    assert response.status == 200
    assert urlsplit(browser_page.url).path == reverse("jobs:list")
    assert browser_page.external_requests == []


def test_a_browser_in_shanghai_sees_its_own_time_zone(
    chromium_browser, live_server, personas, password
):
    context = chromium_browser.new_context(timezone_id="Asia/Shanghai")
    try:
        page = context.new_page()
        login(page, live_server, "alice", password)
        # the first page did not know the zone yet: it is shown again in it
        expect(page.locator("#time-zone-label")).to_contain_text("Asia/Shanghai (UTC+08:00)")
        page.click("#time-zone-label")
        expect(page.locator("h1")).to_have_text("Preferences")
        page.select_option("#time-zone", "Europe/Berlin")
        page.click("#save-time-zone")
        expect(page.locator("#time-zone-label")).to_contain_text("Europe/Berlin (UTC+01:00)")
    finally:
        context.close()


def test_the_health_pages_cards_hold_their_text(browser_page, live_server, admin_user):
    """The Placement card's "(SCHEDULER_PLACEMENT=best_fit)." ran past its card."""
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, live_server, admin_user.username, "password")
    page.goto(f"{live_server.url}{reverse('ops:health')}")
    cards = page.locator(".health-card")
    assert cards.count() > 1
    overflowing = cards.evaluate_all(
        "cards => cards.filter(c => c.scrollWidth > c.clientWidth).map(c => c.id)"
    )
    assert overflowing == []


@pytest.mark.parametrize("path", ["jobs:list", "scheduler:quotas", "market:index"])
def test_the_first_tab_offers_to_skip_to_the_pages_content(
    browser_page, live_server, personas, password, path
):
    """Keyboard users tabbed through the header and the menu's links (13 of them) before
    the page's own content, on every page."""
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}{reverse(path)}")
    skip = page.locator("a.skip-link")
    box = skip.bounding_box()
    assert box is None or box["y"] + box["height"] <= 0, "shown before it is focused"

    page.keyboard.press("Tab")

    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    expect(skip).to_have_text("Skip to content")
    page.keyboard.press("Enter")
    expect(page.locator("main#content")).to_be_focused()
    # the next Tab goes on inside the page, not back to the header or the menu
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.querySelector('main').contains(document.activeElement)")
