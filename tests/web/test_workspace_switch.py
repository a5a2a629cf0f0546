"""The workspace switcher: only to a workspace the user belongs to; back to where they were."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.workspaces.middleware import SESSION_KEY

URL = reverse("workspaces:switch")


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def team_b_member(client, personas, alice):
    """alice, who owns team-a, is also a member of team-b."""
    from apps.workspaces.models import Membership

    Membership.objects.create(user=alice, workspace=personas["ws_b"], role="member")
    client.force_login(alice)
    return client


def test_it_switches_to_a_workspace_of_the_user(team_b_member, personas):
    ws_b = personas["ws_b"]
    response = team_b_member.post(URL, {"workspace_id": ws_b.pk, "next": "/cluster/quotas/"})
    assert response.status_code == 302
    assert response["Location"] == "/cluster/quotas/"
    assert team_b_member.session[SESSION_KEY] == ws_b.pk


def test_it_makes_the_choice_current_on_later_requests(team_b_member, personas):
    team_b_member.post(URL, {"workspace_id": personas["ws_b"].pk})
    response = team_b_member.get(reverse("scheduler:quotas"))
    assert response.wsgi_request.workspace == personas["ws_b"]


def test_it_refuses_a_workspace_the_user_is_not_in(alice_client, personas):
    response = alice_client.post(URL, {"workspace_id": personas["ws_b"].pk})
    assert response.status_code == 404
    assert SESSION_KEY not in alice_client.session


@pytest.mark.parametrize("value", ["", "team-b", "-1", "1.5"])
def test_it_refuses_a_malformed_id(alice_client, value):
    assert alice_client.post(URL, {"workspace_id": value}).status_code == 400


def test_it_refuses_get(alice_client, personas):
    assert alice_client.get(URL, {"workspace_id": personas["ws_a"].pk}).status_code == 405


def test_it_requires_a_login(client, personas):
    response = client.post(URL, {"workspace_id": personas["ws_a"].pk})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_it_goes_to_the_job_list_without_a_safe_next(alice_client, personas):
    for next_url in ("", "https://evil.example.com/", "//evil.example.com/"):
        response = alice_client.post(URL, {"workspace_id": personas["ws_a"].pk, "next": next_url})
        assert response["Location"] == reverse("jobs:list"), next_url


def test_it_lets_a_superuser_switch_anywhere(admin_client, personas):
    response = admin_client.post(URL, {"workspace_id": personas["ws_b"].pk})
    assert response.status_code == 302
    assert admin_client.session[SESSION_KEY] == personas["ws_b"].pk


def test_it_redirects_htmx_requests_on_the_client(alice_client, personas):
    response = alice_client.post(
        URL, {"workspace_id": personas["ws_a"].pk, "next": "/jobs/"}, headers={"HX-Request": "true"}
    )
    assert response["HX-Redirect"] == "/jobs/"


@pytest.mark.parametrize("url", [reverse("jobs:list"), reverse("billing:index")])
def test_a_part_asked_from_a_page_of_another_workspace_reloads_that_page(
    team_b_member, personas, url
):
    """Switched in one tab, the other tab's job list polled the new workspace's jobs into a
    page whose header and filters still named the old one."""
    ws_a, ws_b = personas["ws_a"], personas["ws_b"]
    page = team_b_member.get(url).content.decode()
    assert f'"X-Workspace": "{ws_a.pk}"' in page  # every htmx request of the page says it
    team_b_member.post(URL, {"workspace_id": ws_b.pk})

    stale = team_b_member.get(url, headers={"hx-request": "true", "x-workspace": str(ws_a.pk)})
    assert stale.status_code == 200 and stale["HX-Refresh"] == "true"
    assert stale.content == b""
    current = team_b_member.get(url, headers={"hx-request": "true", "x-workspace": str(ws_b.pk)})
    assert current.status_code == 200 and "HX-Refresh" not in current
    assert current.content
