"""A real Chromium for the browser tests, driven by Playwright's sync API.

One browser per session, a fresh context (cookies, storage) per test. The browser is
Debian's /usr/bin/chromium (PAIWEB_CHROMIUM overrides): Playwright's own browser download
is not used. Every test in this directory is marked `browser`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

# Playwright's sync API runs an asyncio loop in this thread, and Django refuses ORM calls
# from a thread with a running loop. The tests touch the database only between page actions.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = os.environ.get("PAIWEB_CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
TIMEOUT_MS = 15_000


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def chromium_browser() -> Iterator:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is not at {CHROMIUM}: run `make test` (it installs it), or "
            "`sudo apt-get install -y chromium`, or set PAIWEB_CHROMIUM"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def browser_page(chromium_browser) -> Iterator:
    """A page in a fresh context. Requests to anything but this machine are refused and
    recorded in `page.external_requests`: the console must work offline (no CDN)."""
    context = chromium_browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    external: list[str] = []

    def only_local(route) -> None:
        url = route.request.url
        if urlsplit(url).scheme in {"http", "https", "ws", "wss"} and (
            urlsplit(url).hostname not in LOCAL_HOSTS
        ):
            external.append(url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", only_local)
    page = context.new_page()
    page.external_requests = external
    yield page
    context.close()


def login(page, live_server, username: str, password: str):
    """Sign in through the login form; returns the response of the page it lands on."""
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation() as navigation:
        page.locator("form:has(input[name=password]) [type=submit]").first.click()
    return navigation.value
