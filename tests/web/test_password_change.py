"""A console user changes their own password from Preferences: the admin's page is for staff
only, so alice, bob and charlie had no way to change theirs."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

NEW = "a-new-and-long-passphrase-42"


def test_preferences_link_to_changing_the_password(alice_client):
    html = alice_client.get(reverse("workspaces:preferences")).content.decode()
    assert f'href="{reverse("workspaces:password")}"' in html


def test_a_user_changes_their_password_and_stays_signed_in(alice_client, alice, password):
    other = Client()
    other.force_login(alice)

    response = alice_client.post(
        reverse("workspaces:password"),
        {"old_password": password, "new_password1": NEW, "new_password2": NEW},
        follow=True,
    )

    assert response.redirect_chain[-1][0] == reverse("workspaces:preferences")
    assert "Your password was changed." in response.content.decode()
    alice.refresh_from_db()
    assert alice.check_password(NEW)
    assert alice_client.get(reverse("jobs:list")).status_code == 200  # still signed in here
    assert other.get(reverse("jobs:list")).status_code == 302  # the other session ended


def test_a_wrong_current_password_changes_nothing(alice_client, alice, password):
    response = alice_client.post(
        reverse("workspaces:password"),
        {"old_password": "not-it", "new_password1": NEW, "new_password2": NEW},
        headers={"accept-language": "zh-Hans"},
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "修改密码" in html and 'class="field has-error"' in html
    alice.refresh_from_db()
    assert alice.check_password(password)


def test_it_asks_for_a_sign_in_first(client):
    response = client.get(reverse("workspaces:password"))
    assert response.status_code == 302 and response.url.startswith("/login/")


@pytest.fixture
def _throttle_defaults(settings):
    settings.THROTTLE_WINDOW_SECONDS = 900
    settings.LOGIN_THROTTLE_PER_USERNAME = 5
    settings.LOGIN_THROTTLE_PER_ADDRESS = 20


def _change(client, old: str, **extra):
    return client.post(
        reverse("workspaces:password"),
        {"old_password": old, "new_password1": NEW, "new_password2": NEW},
        **extra,
    )


@pytest.mark.usefixtures("_throttle_defaults")
def test_guessing_the_current_password_is_throttled_like_a_sign_in(
    alice_client, alice, password, monkeypatch
):
    """A session (stolen, or left open) could try current passwords without limit. Wrong
    ones count as failed sign-ins of the account: after five, even the right one is refused
    unchecked, with what was typed kept and a status that says so, and the login page is
    locked too."""
    for _ in range(5):
        response = _change(alice_client, "guess")
        assert response.status_code == 200
        assert "Your old password was entered incorrectly" in response.content.decode()
    checked = []
    monkeypatch.setattr(type(alice), "check_password", lambda self, raw: checked.append(raw))
    response = _change(alice_client, password)
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 900
    html = response.content.decode()
    assert "Too many wrong passwords for this account. Try again in 15 minutes." in html
    assert 'id="id_old_password_error"' in html
    assert checked == []
    monkeypatch.undo()
    alice.refresh_from_db()
    assert alice.check_password(password)

    response = _change(alice_client, password, headers={"accept-language": "zh-Hans"})
    assert "此账号输错密码的次数过多，请 15 分钟后再试。" in response.content.decode()
    login = Client().post("/login/", {"username": "alice", "password": password})
    assert login.status_code == 429  # one count for the account, wherever it was guessed


@pytest.mark.usefixtures("_throttle_defaults")
def test_the_right_current_password_resets_the_count(alice_client, alice, password):
    for _ in range(4):
        assert _change(alice_client, "guess").status_code == 200
    response = _change(alice_client, password)
    assert response.status_code == 302
    alice.refresh_from_db()
    assert alice.check_password(NEW)
    for _ in range(4):
        assert _change(alice_client, "guess").status_code == 200
    assert _change(alice_client, NEW).status_code == 302


def test_the_admins_password_change_is_the_throttled_one(admin_client):
    """The admin's own form checked the current password without limit."""
    response = admin_client.get("/admin/password_change/")
    assert response.status_code == 302 and response.url == reverse("workspaces:password")
    response = admin_client.post("/admin/password_change/", {"old_password": "guess"})
    assert response.status_code == 302 and response.url == reverse("workspaces:password")
