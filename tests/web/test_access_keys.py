"""The access-key page: create (secret shown once, stored encrypted, never logged),
disable, enable, delete; only the user's own keys."""

from __future__ import annotations

import logging

import pytest
from django.urls import reverse

from apps.workspaces.models import AccessKey
from apps.workspaces.services import MAX_ACCESS_KEYS_PER_USER
from tests.factories import make_access_key

LIST = reverse("workspaces:access-keys")
CREATE = reverse("workspaces:access-key-create")


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _url(name: str, key: AccessKey) -> str:
    return reverse(f"workspaces:access-key-{name}", args=[key.key_id])


def test_it_needs_a_login(client, alice):
    response = client.get(LIST)
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_it_lists_only_the_users_keys(alice_client, alice, charlie):
    mine, _ = make_access_key(alice)
    theirs, _ = make_access_key(charlie)
    page = alice_client.get(LIST).content.decode()
    assert mine.key_id in page and theirs.key_id not in page


def test_it_creates_a_key_and_shows_the_secret_once(alice_client, alice, caplog):
    caplog.set_level(logging.DEBUG)
    response = alice_client.post(CREATE, {"description": "notebook"})
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    key = AccessKey.objects.get(user=alice)
    secret = key.secret()
    assert key.enabled and key.description == "notebook" and key.key_id.startswith("LTAI")
    page = response.content.decode()
    assert key.key_id in page and secret in page
    assert secret not in key.secret_encrypted  # stored encrypted
    assert secret not in caplog.text  # never logged
    again = alice_client.get(LIST).content.decode()
    assert key.key_id in again and secret not in again  # shown once only


def test_it_refuses_a_description_too_long(alice_client, alice):
    response = alice_client.post(CREATE, {"description": "x" * 201})
    assert response.status_code == 400
    assert not AccessKey.objects.filter(user=alice).exists()


def test_it_limits_the_number_of_keys(alice_client, alice):
    for _ in range(MAX_ACCESS_KEYS_PER_USER):
        make_access_key(alice)
    response = alice_client.post(CREATE, {"description": ""})
    assert response.status_code == 409
    assert "delete one first" in response.content.decode()
    assert AccessKey.objects.filter(user=alice).count() == MAX_ACCESS_KEYS_PER_USER


def test_it_disables_enables_and_deletes_a_key(alice_client, alice):
    key, _ = make_access_key(alice)
    assert alice_client.post(_url("disable", key)).status_code == 302
    key.refresh_from_db()
    assert not key.enabled
    assert alice_client.post(_url("enable", key)).status_code == 302
    key.refresh_from_db()
    assert key.enabled

    response = alice_client.post(_url("delete", key))  # enabled keys are not deleted
    assert response.status_code == 409 and "Disable" in response.content.decode()
    alice_client.post(_url("disable", key))
    assert alice_client.post(_url("delete", key)).status_code == 302
    assert not AccessKey.objects.filter(pk=key.pk).exists()


def test_htmx_gets_the_key_table_back(alice_client, alice):
    key, _ = make_access_key(alice)
    response = alice_client.post(_url("disable", key), headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="key-table"') and "Disabled" in html
    assert "<html" not in html


@pytest.mark.parametrize("action", ["disable", "enable", "delete"])
def test_another_users_key_is_not_found(alice_client, charlie, action):
    theirs, _ = make_access_key(charlie)
    if action == "delete":
        AccessKey.objects.filter(pk=theirs.pk).update(enabled=False)
    assert alice_client.post(_url(action, theirs)).status_code == 404
    assert AccessKey.objects.filter(pk=theirs.pk).exists()


def test_actions_need_post(alice_client, alice):
    key, _ = make_access_key(alice)
    assert alice_client.get(_url("disable", key)).status_code == 405
    assert alice_client.get(CREATE).status_code == 405
