"""Throttling of bad AccessKey signatures (apps/api/auth.py over apps/core/throttle.py), over
real HTTP with the official SDK: per (key, address), per address and, looser, per key.

The live server sees every request from 127.0.0.1; with TRUSTED_PROXY_COUNT=1 the tests say
which address a request comes from in X-Forwarded-For, as compose's nginx would."""

from __future__ import annotations

from datetime import timedelta

import alibabacloud_pai_dlc20201203.client as dlc_client
import pytest
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_pai_dlc20201203.models import ListJobsRequest
from django.utils import timezone

from tests.api.conftest import ALICE_KEY, BOB_KEY, RawClient, config, sdk_error

# The runtime options type the installed SDK's client takes (darabonba's, or tea-util's).
RuntimeOptions = (
    getattr(dlc_client, "RuntimeOptions", None) or dlc_client.util_models.RuntimeOptions
)

ATTACKER, VICTIM = "203.0.113.7", "198.51.100.9"
WRONG_SECRET = (ALICE_KEY[0], "not-the-secret")


@pytest.fixture(autouse=True)
def _small_limits(settings):
    settings.THROTTLE_WINDOW_SECONDS = 900
    settings.API_THROTTLE_PER_KEY_ADDRESS = 3
    settings.API_THROTTLE_PER_ADDRESS = 6
    settings.API_THROTTLE_PER_KEY = 9
    settings.TRUSTED_PROXY_COUNT = 1


@pytest.fixture
def sdk(endpoint, keys):
    """sdk(key) → a DLC client signing with `key` (a (key id, secret) pair)."""
    return lambda key: DLCClient(config(endpoint, key))


def list_jobs(client: DLCClient, address: str) -> tuple[str, int]:
    """("OK", 200) or the (Code, status) the SDK raised, for a call from `address`."""
    try:
        client.list_jobs_with_options(
            ListJobsRequest(), {"X-Forwarded-For": address}, RuntimeOptions()
        )
    except Exception as error:  # the SDK's exception types differ between generations
        return sdk_error(pytest.ExceptionInfo.from_exception(error))
    return "OK", 200


def test_it_answers_429_after_the_limit_of_bad_signatures(sdk):
    for _ in range(3):
        assert list_jobs(sdk(WRONG_SECRET), ATTACKER) == ("SignatureDoesNotMatch", 400)
    with pytest.raises(Exception) as caught:
        sdk(WRONG_SECRET).list_jobs_with_options(
            ListJobsRequest(), {"X-Forwarded-For": ATTACKER}, RuntimeOptions()
        )
    assert sdk_error(caught) == ("Throttling.User", 429)
    assert "bad signature for this AccessKeyId from your address. Retry after 20" in str(
        caught.value
    )


def test_a_correct_signature_is_refused_too_while_locked(sdk):
    for _ in range(3):
        list_jobs(sdk(WRONG_SECRET), ATTACKER)
    assert list_jobs(sdk(ALICE_KEY), ATTACKER) == ("Throttling.User", 429)


def test_the_same_key_from_another_address_keeps_working(sdk):
    for _ in range(3):
        list_jobs(sdk(WRONG_SECRET), ATTACKER)
    assert list_jobs(sdk(ALICE_KEY), VICTIM) == ("OK", 200)
    assert list_jobs(sdk(BOB_KEY), ATTACKER) == ("OK", 200)  # the address is under its limit


def test_the_address_limit_spans_keys(sdk):
    for n in range(6):  # unknown keys count like bad signatures
        assert list_jobs(sdk((f"LTAI5tNoSuchKey{n:08}", "x")), ATTACKER) == (
            "InvalidAccessKeyId.NotFound",
            404,
        )
    assert list_jobs(sdk(BOB_KEY), ATTACKER) == ("Throttling", 429)
    assert list_jobs(sdk(BOB_KEY), VICTIM) == ("OK", 200)


def test_the_looser_key_limit_spans_addresses(sdk):
    for n in range(9):
        assert list_jobs(sdk(WRONG_SECRET), f"192.0.2.{n}") == ("SignatureDoesNotMatch", 400)
    assert list_jobs(sdk(ALICE_KEY), VICTIM) == ("Throttling.User", 429)
    assert list_jobs(sdk(BOB_KEY), VICTIM) == ("OK", 200)


def test_a_good_signature_resets_its_key_and_address_count(sdk):
    for _ in range(2):
        list_jobs(sdk(WRONG_SECRET), ATTACKER)
    assert list_jobs(sdk(ALICE_KEY), ATTACKER) == ("OK", 200)
    for _ in range(2):
        assert list_jobs(sdk(WRONG_SECRET), ATTACKER) == ("SignatureDoesNotMatch", 400)
    assert list_jobs(sdk(ALICE_KEY), ATTACKER) == ("OK", 200)


def test_a_good_signature_resets_only_a_count_there_is(sdk, monkeypatch):
    from apps.api import auth

    resets = []
    real = auth.throttle_reset
    monkeypatch.setattr(
        auth, "throttle_reset", lambda **kw: resets.append(kw["scopes"]) or real(**kw)
    )
    assert list_jobs(sdk(ALICE_KEY), VICTIM) == ("OK", 200)
    assert resets == [[]]  # nothing to forget: no key deleted, no call to Redis
    list_jobs(sdk(WRONG_SECRET), VICTIM)
    assert list_jobs(sdk(ALICE_KEY), VICTIM) == ("OK", 200)
    assert [[scope.kind for scope in scopes] for scopes in resets[1:]] == [["api-key-address"]]


def test_only_bad_signatures_count(raw):
    stale = timezone.now() - timedelta(hours=1)
    for _ in range(5):
        response = raw.send(
            "GET", "/api/v1/jobs", headers=raw.headers("GET", "/api/v1/jobs", date=stale)
        )
        assert response.json()["Code"] == "InvalidTimeStamp.Expired"
    assert raw.send("GET", "/api/v1/jobs").status_code == 200


def test_the_lock_expires_after_the_window(live_server, keys, monkeypatch):
    now = [timezone.now()]
    monkeypatch.setattr(timezone, "now", lambda: now[0])
    good, bad = RawClient(live_server.url, ALICE_KEY), RawClient(live_server.url, WRONG_SECRET)

    def send(client: RawClient):
        return client.send(
            "GET", "/api/v1/jobs", headers=client.headers("GET", "/api/v1/jobs", date=now[0])
        )

    for _ in range(3):
        assert send(bad).json()["Code"] == "SignatureDoesNotMatch"
    now[0] += timedelta(seconds=899)
    for _ in range(5):  # refused requests do not count, nor lengthen the lock
        response = send(bad)
        assert response.status_code == 429 and response.json()["Code"] == "Throttling.User"
        # When to come back, as the SDK reads it (milliseconds) and in plain HTTP (seconds).
        assert response.headers["Retry-After"] == "1"
        assert response.headers["x-acs-retry-after"] == "1000"
    assert send(good).status_code == 429
    now[0] += timedelta(seconds=1)
    assert send(good).status_code == 200
