"""The page frame every console page shares (base.html) and the login page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.urls import reverse

TEMPLATES = Path(settings.BASE_DIR) / "templates"


def test_it_renders_the_login_page(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="username"' in html and 'name="password"' in html
    assert "Sign in to paiweb" in html
    assert "css/paiweb.css" in html


def test_it_rejects_a_bad_password(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "wrong-password"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_it_logs_in_with_the_right_password(client, alice, password):
    response = client.post("/login/", {"username": "alice", "password": password})
    assert response.status_code == 302
    assert response.url == reverse("jobs:list")


def test_it_sends_anonymous_users_to_the_login_page(client, db):
    response = client.get(reverse("jobs:list"))
    assert response.status_code == 302
    assert response.url.startswith("/login/?next=")


def test_it_links_every_page_in_the_nav(alice_client, settings):
    html = alice_client.get(reverse("jobs:list")).content.decode()
    for name in (
        "jobs:list",
        "jobs:create",
        "scheduler:quotas",
        "workspaces:access-keys",
        "market:index",
        "billing:index",
    ):
        assert f'href="{reverse(name)}"' in html, name
    # alice is not staff: no operations links at all
    assert reverse("ops:health") not in html
    assert settings.FLOWER_URL not in html
    assert reverse("admin:index") not in html


def test_it_links_health_flower_and_the_admin_for_staff(client, alice, settings):
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    html = client.get(reverse("jobs:list")).content.decode()
    for url in (reverse("ops:health"), settings.FLOWER_URL, reverse("admin:index")):
        assert f'href="{url}"' in html, url


def test_it_offers_the_workspace_switcher(client, personas):
    ws_c = personas["ws_b"]
    personas["alice"].workspaces.add(ws_c, through_defaults={"role": "member"})
    client.force_login(personas["alice"])
    html = client.get(reverse("jobs:list")).content.decode()
    form = re.search(
        r'<form class="ws-switch" method="post" action="([^"]+)">(.*?)</form>', html, re.S
    )
    assert form and form[1] == reverse("workspaces:switch")
    assert 'name="workspace_id"' in form[2]
    assert "csrfmiddlewaretoken" in form[2]
    assert f'<option value="{personas["ws_a"].pk}" selected>Team A</option>' in form[2]
    assert f'<option value="{ws_c.pk}">Team B</option>' in form[2]


def test_it_shows_the_user_and_a_logout_form(alice_client):
    html = alice_client.get(reverse("jobs:list")).content.decode()
    assert "alice" in html
    assert re.search(rf'<form method="post" action="{reverse("logout")}">', html)


def test_it_sends_the_csrf_token_with_htmx_requests(alice_client):
    html = alice_client.get(reverse("jobs:list")).content.decode()
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\", ", html)


@pytest.mark.parametrize("url_name", ["jobs:list", "jobs:create"])
def test_it_serves_every_asset_of_the_page_from_static(alice_client, url_name):
    html = alice_client.get(reverse(url_name)).content.decode()
    assets = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
    assert any(a.endswith("htmx.min.js") for a in assets)
    assert any(a.endswith("paiweb.css") for a in assets)
    for url in assets:
        assert url.startswith(settings.STATIC_URL) or url.startswith("/" + settings.STATIC_URL), url
        path = url.split(settings.STATIC_URL, 1)[1]
        assert finders.find(path), f"{url} is not a file in static/"


def test_it_answers_favicon_ico_with_the_console_icon(client, db):
    """The admin's pages have no icon link, so the browser asks for /favicon.ico."""
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(settings.STATIC_URL) and location.endswith(".svg")
    assert finders.find(location.removeprefix(settings.STATIC_URL))


def test_it_loads_no_asset_from_another_host():
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        remote = re.search(r'<(?:script|link|img)[^>]+(?:src|href)="(?:https?:)?//', text)
        assert not remote, template


def test_it_vendors_htmx_and_the_chart_library_with_their_licenses():
    static = Path(settings.BASE_DIR) / "static" / "vendor"
    assert (static / "htmx" / "htmx.min.js").stat().st_size > 10_000
    assert (static / "htmx" / "LICENSE").exists()
    assert (static / "uplot" / "uPlot.iife.min.js").stat().st_size > 10_000
    assert (static / "uplot" / "LICENSE").exists()


def test_an_htmx_request_after_the_session_ended_sends_the_whole_page_to_sign_in(client, db):
    """The job list's poll, its session gone, swapped the sign-in page into the list."""
    response = client.get(
        reverse("jobs:list"),
        headers={
            "hx-request": "true",
            "hx-target": "job-table",
            "hx-current-url": "http://testserver/jobs/?status=Succeeded",
        },
    )

    assert response.status_code == 200 and response.content == b""
    assert response["HX-Redirect"] == "/login/?next=/jobs/%3Fstatus%3DSucceeded"


def test_it_returns_to_this_site_only(client, db):
    response = client.get(
        reverse("jobs:list"),
        headers={"hx-request": "true", "hx-current-url": "https://evil.example/phish"},
    )

    assert response["HX-Redirect"] == "/login/?next=/jobs/"


def test_a_page_after_the_session_ended_is_still_redirected(client, db):
    response = client.get(reverse("jobs:list"))
    assert response.status_code == 302 and response.url == "/login/?next=/jobs/"


def test_a_signed_in_user_is_not_asked_to_sign_in_again(alice_client):
    """Back after signing in showed the sign-in form under the console's header, alice's
    name and Log out beside it."""
    assert alice_client.get("/login/").url == reverse("jobs:list")
    assert alice_client.get("/login/", {"next": "/cluster/quotas/"}).url == "/cluster/quotas/"
    assert alice_client.get("/login/", {"next": "https://evil.example/"}).url == reverse(
        "jobs:list"
    )


def test_a_form_sent_after_the_session_ended_returns_to_its_page_once_signed_in(client, db):
    """Stop, its session gone, sent the reader to sign in and then on to GET /…/stop/: a 405
    and a blank page."""
    response = client.post(
        "/jobs/dlc0123456789abcd/stop/",
        headers={"referer": "http://testserver/jobs/dlc0123456789abcd/?x=1"},
    )
    assert response.status_code == 302
    assert response.url == "/login/?next=/jobs/dlc0123456789abcd/%3Fx%3D1"

    elsewhere = client.post("/jobs/stop/", headers={"referer": "https://evil.example/"})
    assert elsewhere.url == "/login/?next=/jobs/"


def test_the_create_form_sent_after_the_session_ended_comes_back_as_typed(
    client, personas, password
):
    """The session ended while a job was being written (signed out in another tab): the
    sign-in brought back /jobs/new/, empty. It holds what was typed now, once."""
    from apps.jobs.models import Job
    from tests.web.test_jobs_views import quota_form

    data = quota_form(
        display_name="训练-typed-before-sign-in", user_command="python train.py --epochs 90"
    )
    data["form_workspace"] = str(personas["ws_a"].pk)
    response = client.post(
        reverse("jobs:create"), data, headers={"referer": "http://testserver/jobs/new/"}
    )
    assert response.url == "/login/?next=/jobs/new/"
    signed_in = client.post(response.url, {"username": "alice", "password": password})
    assert signed_in.url == "/jobs/new/"

    page = client.get("/jobs/new/").content.decode()
    assert 'id="unsent-form"' in page
    assert 'value="训练-typed-before-sign-in"' in page
    assert "python train.py --epochs 90</textarea>" in page
    assert 'id="form-errors"' not in page  # nothing to fix: it was not sent
    assert Job.objects.count() == 0
    again = client.get("/jobs/new/").content.decode()
    assert 'id="unsent-form"' not in again and "typed-before-sign-in" not in again


def test_only_the_create_form_is_kept_and_never_a_password(client, personas, password):
    client.post(
        reverse("workspaces:password"),
        {"old_password": password, "new_password1": "x", "new_password2": "x"},
        headers={"referer": "http://testserver/workspaces/password/"},
    )
    assert "unsent_form" not in client.session
    client.post(
        reverse("jobs:create"),
        {"display_name": "t"},
        headers={"referer": "https://evil.example/jobs/new/"},  # not from its own page
    )
    assert "unsent_form" not in client.session
    client.post(
        reverse("jobs:create"),
        {"display_name": "t", "password": "secret"},
        headers={"referer": "http://testserver/jobs/new/"},
    )
    assert client.session["unsent_form"]["fields"] == {"display_name": ["t"]}


def test_the_language_switch_on_the_sign_in_page_goes_back_to_it(client, db):
    response = client.post(
        reverse("workspaces:language"),
        {"language": "en", "next": "/login/?next=/jobs/"},
        headers={"referer": "http://testserver/login/?next=/jobs/"},
    )
    assert response["Location"] == "/login/?next=/jobs/"


def test_every_page_forbids_inline_scripts_eval_and_framing(alice_client, client):
    """Content-Security-Policy: scripts from this site's files only, in the console, on the
    sign-in page and in the admin."""
    for response in (
        alice_client.get(reverse("jobs:list")),
        client.get("/login/"),
        client.get("/admin/login/"),
    ):
        policy = dict(
            directive.strip().split(" ", 1)
            for directive in response["Content-Security-Policy"].split(";")
        )
        assert policy["script-src"] == "'self'"
        assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    # what the policy would refuse in the browser: an inline script, an event-handler
    # attribute (htmx's hx-on too), an htmx trigger filter (an event name, then [expression])
    refused = re.compile(r"<script(?![^>]*\bsrc=)|\s(on\w+|hx-on[:-]\S*)=|\b(every \w+|load) *\[")
    assert [t.name for t in TEMPLATES.rglob("*.html") if refused.search(t.read_text())] == []
