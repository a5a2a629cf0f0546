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
