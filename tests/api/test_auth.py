"""AccessKey authentication: ACS3-HMAC-SHA256 signatures, timestamps, nonces, and the
error codes the SDK surfaces."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_pai_dlc20201203.models import ListJobsRequest

from apps.workspaces.models import AccessKey
from tests.api.conftest import config, sdk_error


def test_a_signed_request_is_answered_with_a_request_id(raw):
    response = raw.send("GET", "/api/v1/jobs")
    assert response.status_code == 200
    assert response.json()["RequestId"] == response.headers["x-acs-request-id"]
    assert AccessKey.objects.get(key_id=raw.key_id).last_used_at is not None


@pytest.mark.parametrize(
    ("key", "code", "status"),
    [
        (("LTAI5tNoSuchKey00000001", "whatever"), "InvalidAccessKeyId.NotFound", 404),
        (("LTAI5tTestAlice00000001", "not-the-secret"), "SignatureDoesNotMatch", 400),
    ],
    ids=["unknown-key", "wrong-secret"],
)
def test_the_sdk_surfaces_the_error_code(endpoint, keys, key, code, status):
    client = DLCClient(config(endpoint, key))
    with pytest.raises(Exception) as caught:
        client.list_jobs(ListJobsRequest())
    assert sdk_error(caught) == (code, status)


def test_a_disabled_key_is_refused_at_once(dlc, keys):
    dlc.list_jobs(ListJobsRequest())
    AccessKey.objects.filter(key_id=keys["alice"][0]).update(enabled=False)
    with pytest.raises(Exception) as caught:
        dlc.list_jobs(ListJobsRequest())
    assert sdk_error(caught) == ("InvalidAccessKeyId.Inactive", 400)


def test_a_key_made_under_another_encryption_secret_is_refused_with_a_400(dlc, keys):
    from cryptography.fernet import Fernet

    from apps.workspaces.crypto import fernet_key

    other = Fernet(fernet_key("an-earlier-secret")).encrypt(keys["alice"][1].encode()).decode()
    AccessKey.objects.filter(key_id=keys["alice"][0]).update(secret_encrypted=other)
    with pytest.raises(Exception) as caught:
        dlc.list_jobs(ListJobsRequest())
    assert sdk_error(caught) == ("InvalidAccessKeyId.Inactive", 400)
    assert "Create a new AccessKey" in str(caught.value)


def test_a_key_of_a_deactivated_user_is_refused(dlc, personas):
    personas["alice"].is_active = False
    personas["alice"].save()
    with pytest.raises(Exception) as caught:
        dlc.list_jobs(ListJobsRequest())
    assert sdk_error(caught)[0] == "InvalidAccessKeyId.Inactive"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (
            lambda h: {**h, "Authorization": h["Authorization"][:-4] + "0000"},
            "SignatureDoesNotMatch",
        ),
        (lambda h: {**h, "x-acs-action": "DeleteJob"}, "SignatureDoesNotMatch"),
        (lambda h: {**h, "x-acs-content-sha256": "0" * 64}, "SignatureDoesNotMatch"),
        (lambda h: {k: v for k, v in h.items() if k != "Authorization"}, "IncompleteSignature"),
        (lambda h: {**h, "Authorization": "Bearer token"}, "IncompleteSignature"),
        (
            lambda h: {
                **h,
                "Authorization": h["Authorization"].replace("ACS3-HMAC-SHA256", "ACS3-HMAC-SM3"),
            },
            "InvalidSignatureMethod",
        ),
        (lambda h: {**h, "x-acs-date": "yesterday"}, "InvalidTimeStamp.Format"),
    ],
    ids=[
        "signature",
        "signed-header",
        "payload-hash",
        "no-authorization",
        "bearer",
        "algorithm",
        "date-format",
    ],
)
def test_it_refuses_a_tampered_request(raw, change, code):
    headers = change(raw.headers("GET", "/api/v1/jobs", query={"ShowOwn": "true"}))
    response = raw.send("GET", "/api/v1/jobs", query={"ShowOwn": "true"}, headers=headers)
    assert response.status_code == 400
    assert response.json()["Code"] == code


def test_it_refuses_a_changed_query_or_body(raw, ws_a):
    headers = raw.headers("GET", "/api/v1/jobs", query={"ShowOwn": "true"})
    response = raw.send("GET", "/api/v1/jobs", query={"ShowOwn": "false"}, headers=headers)
    assert response.json()["Code"] == "SignatureDoesNotMatch"
    body = b'{"WorkspaceId": "%s"}' % ws_a.encode()
    headers = raw.headers("POST", "/api/v1/jobs", body=body)
    response = raw.send(
        "POST", "/api/v1/jobs", body=body.replace(b"}", b', "x": 1}'), headers=headers
    )
    assert response.json()["Code"] == "SignatureDoesNotMatch"


@pytest.mark.parametrize("skew", [timedelta(minutes=16), -timedelta(minutes=16), timedelta(days=1)])
def test_it_refuses_a_timestamp_outside_15_minutes(raw, skew):
    date = datetime.now(UTC) + skew
    headers = raw.headers("GET", "/api/v1/jobs", date=date)
    response = raw.send("GET", "/api/v1/jobs", headers=headers)
    assert response.status_code == 400
    assert response.json()["Code"] == "InvalidTimeStamp.Expired"


def test_it_accepts_a_timestamp_within_15_minutes(raw):
    headers = raw.headers("GET", "/api/v1/jobs", date=datetime.now(UTC) - timedelta(minutes=14))
    assert raw.send("GET", "/api/v1/jobs", headers=headers).status_code == 200


def test_it_refuses_a_reused_nonce(raw):
    nonce = uuid.uuid4().hex
    first = raw.send("GET", "/api/v1/jobs", headers=raw.headers("GET", "/api/v1/jobs", nonce=nonce))
    assert first.status_code == 200
    again = raw.send("GET", "/api/v1/jobs", headers=raw.headers("GET", "/api/v1/jobs", nonce=nonce))
    assert again.status_code == 400
    assert again.json()["Code"] == "SignatureNonceUsed"


def test_a_bad_signature_does_not_burn_the_nonce(raw):
    nonce = uuid.uuid4().hex
    headers = raw.headers("GET", "/api/v1/jobs", nonce=nonce)
    forged = {**headers, "Authorization": headers["Authorization"][:-4] + "0000"}
    assert raw.send("GET", "/api/v1/jobs", headers=forged).status_code == 400
    assert raw.send("GET", "/api/v1/jobs", headers=headers).status_code == 200


def test_a_nonce_is_per_key(raw, live_server, keys):
    from tests.api.conftest import RawClient

    nonce = uuid.uuid4().hex
    bob = RawClient(live_server.url, keys["bob"])
    assert (
        raw.send(
            "GET", "/api/v1/jobs", headers=raw.headers("GET", "/api/v1/jobs", nonce=nonce)
        ).status_code
        == 200
    )
    assert (
        bob.send(
            "GET", "/api/v1/jobs", headers=bob.headers("GET", "/api/v1/jobs", nonce=nonce)
        ).status_code
        == 200
    )


def test_requests_without_a_signature_never_reach_the_handlers(raw):
    response = raw.send("POST", "/api/v1/jobs", body=b"{}", headers={})
    assert response.status_code == 400
    assert response.json()["Code"] == "IncompleteSignature"
