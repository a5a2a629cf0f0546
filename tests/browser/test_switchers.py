"""The header's workspace and language switchers in a real Chromium: a mouse choice switches
at once; a keyboard one waits for Enter (or for the focus to leave the list), so the arrow
keys can pass over the choices in between."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.workspaces.models import Membership, Workspace
from tests.browser.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def three_workspaces(personas, alice):
    """alice is in team-a (current), team-b and a third, in that order in the switcher."""
    Membership.objects.create(user=alice, workspace=personas["ws_b"], role="member")
    third = Workspace.objects.create(name="zz-third", display_name="Third")
    Membership.objects.create(user=alice, workspace=third, role="member")
    return [personas["ws_a"], personas["ws_b"], third]


def _switcher_order(page) -> list[str]:
    return page.locator("#workspace-switch option").evaluate_all("os => os.map(o => o.value)")


def test_the_arrow_keys_pass_over_workspaces_until_enter(
    browser_page, live_server, password, three_workspaces
):
    page = browser_page
    login(page, live_server, "alice", password)
    page.goto(f"{live_server.url}/cluster/quotas/")
    order = _switcher_order(page)
    switcher = page.locator("#workspace-switch")
    start = switcher.input_value()
    assert order.index(start) == 0, order  # the first workspace is the current one
    target = order[2]

    page.evaluate("window.notReloaded = true")
    switcher.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.wait_for_timeout(500)
    assert page.evaluate("window.notReloaded === true")
    expect(switcher).to_be_focused()  # no reload: still on the list, choosing
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.locator("#workspace-switch")).to_have_value(target)
    assert page.url.endswith("/cluster/quotas/")

    page.locator("#workspace-switch").focus()  # Escape takes a keyed choice back
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    page.wait_for_timeout(500)
    page.reload()
    expect(page.locator("#workspace-switch")).to_have_value(target)

    with page.expect_navigation():  # a mouse (or touch) choice switches at once
        page.locator("#workspace-switch").select_option(start)
    expect(page.locator("#workspace-switch")).to_have_value(start)


def test_leaving_the_language_list_applies_a_keyed_choice(browser_page, live_server, password):
    page = browser_page
    login(page, live_server, "alice", password)
    language = page.locator("#language-switch")
    expect(language).to_have_value("en")
    page.evaluate("window.notReloaded = true")
    language.focus()
    page.keyboard.press("ArrowDown")
    page.wait_for_timeout(500)
    assert page.evaluate("window.notReloaded === true")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    with page.expect_navigation():
        page.keyboard.press("Tab")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
