"""apps.api.signature against the SDK's own ACS3-HMAC-SHA256 signer, on fixed requests.

Each vector is signed twice: by the signer the installed SDK uses (tea-openapi 0.4's
`Utils.get_authorization`, and alibabacloud_openapi_util's, which tea-openapi 0.3 and the
pinned 1.4.17 era use) and by ours; the Authorization headers must be identical, and ours
must verify what the SDK signed.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from apps.api import signature as sig

KEY_ID, SECRET = "LTAI5tVectorKey00000001", "VectorSecret0000000000000000001"
NOW = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)


def _sdk_signers():
    found = []
    for module, attr in (
        ("alibabacloud_tea_openapi.utils", "Utils"),
        ("alibabacloud_openapi_util.client", "Client"),
    ):
        try:
            found.append(
                pytest.param(
                    getattr(importlib.import_module(module), attr).get_authorization, id=module
                )
            )
        except (ImportError, AttributeError):
            continue
    return found


SDK_SIGNERS = _sdk_signers()


def _headers(body: bytes, **extra: str) -> dict[str, str]:
    headers = {
        "host": "127.0.0.1:8000",
        "x-acs-version": "2020-12-03",
        "x-acs-action": "CreateJob",
        "user-agent": "AlibabaCloud (Linux; x86_64) Python/3.12.1 Core/3.0.0 TeaDSL/1",
        "x-acs-date": "2026-11-29T10:00:00Z",
        "x-acs-signature-nonce": "6f1c3c0c8d0b4a3f9f3f1f9e9d8c7b6a",
        "accept": "application/json",
        "x-acs-content-sha256": sig.hashed_payload(body),
    }
    if body:
        headers["content-type"] = "application/json; charset=utf-8"
    return {**headers, **extra}


BODY = b'{"WorkspaceId": "1", "DisplayName": "sample-spot-job", "JobSpecs": [{"PodCount": 1}]}'
VECTORS = {
    "create-job": sig.SignedRequest("POST", "/api/v1/jobs", {}, _headers(BODY), BODY),
    "get-job": sig.SignedRequest(
        "GET",
        "/api/v1/jobs/dlc1a2b3c4d5e6f70",
        {"NeedDetail": "True"},
        _headers(b"", **{"x-acs-action": "GetJob"}),
    ),
    "list-jobs-odd-query": sig.SignedRequest(
        "GET",
        "/api/v1/jobs",
        {
            "DisplayName": "spot job*~/+ä",
            "ShowOwn": "True",
            "Status": "Bidding",
            "StartTime": "2026-11-29T00:00:00Z",
            "PageSize": "10",
            "Empty": "",
        },
        _headers(b"", **{"x-acs-action": "ListJobs"}),
    ),
    "encoded-path": sig.SignedRequest(
        "GET", "/api/v1/jobs/dlc%20x%2Ay/pods/p~1/logs", {}, _headers(b"")
    ),
}


def _sdk_authorization(sdk_sign, request: sig.SignedRequest) -> str:
    tea_request = SimpleNamespace(
        method=request.method,
        pathname=request.path,
        query=dict(request.query),
        headers=dict(request.headers),
    )
    return sdk_sign(
        tea_request, "ACS3-HMAC-SHA256", sig.hashed_payload(request.body), KEY_ID, SECRET
    )


@pytest.mark.parametrize("sdk_sign", SDK_SIGNERS)
@pytest.mark.parametrize("name", VECTORS)
def test_it_signs_exactly_as_the_sdk(sdk_sign, name):
    request = VECTORS[name]
    expected = _sdk_authorization(sdk_sign, request)
    assert sig.sign(request, access_key_id=KEY_ID, secret=SECRET) == expected


@pytest.mark.parametrize("sdk_sign", SDK_SIGNERS)
@pytest.mark.parametrize("name", VECTORS)
def test_it_verifies_what_the_sdk_signed(sdk_sign, name):
    request = VECTORS[name]
    auth = sig.parse_authorization(_sdk_authorization(sdk_sign, request))
    assert auth.access_key_id == KEY_ID
    assert "x-acs-signature-nonce" in auth.signed_headers
    sig.verify(request, auth, secret=SECRET)


KNOWN_SIGNATURE = "fce1958e56b3566bf5302f74a13ba554526d663eacb324670bfa7c0bbfc559ab"


def test_it_matches_a_known_answer():
    """A literal vector, so a change in both signers at once would still be noticed."""
    request = VECTORS["get-job"]
    assert sig.canonical_request(request, signed_headers=request.headers) == (
        "GET\n/api/v1/jobs/dlc1a2b3c4d5e6f70\nNeedDetail=True\n"
        "accept:application/json\nhost:127.0.0.1:8000\n"
        "user-agent:AlibabaCloud (Linux; x86_64) Python/3.12.1 Core/3.0.0 TeaDSL/1\n"
        "x-acs-action:GetJob\n"
        "x-acs-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-acs-date:2026-11-29T10:00:00Z\n"
        "x-acs-signature-nonce:6f1c3c0c8d0b4a3f9f3f1f9e9d8c7b6a\nx-acs-version:2020-12-03\n\n"
        "accept;host;user-agent;x-acs-action;x-acs-content-sha256;x-acs-date;"
        "x-acs-signature-nonce;x-acs-version\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    authorization = sig.sign(request, access_key_id=KEY_ID, secret=SECRET)
    assert authorization.endswith(f"Signature={KNOWN_SIGNATURE}")


def _signed(request: sig.SignedRequest) -> sig.Authorization:
    return sig.parse_authorization(sig.sign(request, access_key_id=KEY_ID, secret=SECRET))


@pytest.mark.parametrize(
    "change",
    [
        {"body": BODY.replace(b"sample", b"sampl3")},
        {"method": "PUT"},
        {"path": "/api/v1/jobs/other"},
        {"query": {"WorkspaceId": "2"}},
        {"headers": {**VECTORS["create-job"].headers, "x-acs-action": "DeleteJob"}},
    ],
    ids=["body", "method", "path", "query", "header"],
)
def test_it_rejects_a_request_changed_after_signing(change):
    original = VECTORS["create-job"]
    auth = _signed(original)
    fields = {
        "method": original.method,
        "path": original.path,
        "query": original.query,
        "headers": original.headers,
        "body": original.body,
        **change,
    }
    with pytest.raises(sig.SignatureError) as caught:
        sig.verify(sig.SignedRequest(**fields), auth, secret=SECRET)
    assert caught.value.code == "SignatureDoesNotMatch"


def test_it_rejects_the_wrong_secret():
    request = VECTORS["get-job"]
    with pytest.raises(sig.SignatureError) as caught:
        sig.verify(request, _signed(request), secret=SECRET + "x")
    assert caught.value.code == "SignatureDoesNotMatch"
    assert "string to sign" in caught.value.message


def test_it_accepts_the_path_as_the_server_decoded_it_if_told():
    request = VECTORS["encoded-path"]
    auth = _signed(request)
    decoded = sig.SignedRequest("GET", "/api/v1/jobs/dlc x*y/pods/p~1/logs", {}, request.headers)
    with pytest.raises(sig.SignatureError):
        sig.verify(decoded, auth, secret=SECRET)
    sig.verify(decoded, auth, secret=SECRET, paths=[request.path])


@pytest.mark.parametrize(
    "offset", [timedelta(0), timedelta(minutes=14, seconds=59), -timedelta(minutes=15)]
)
def test_it_accepts_a_timestamp_within_15_minutes(offset):
    stamp = (NOW + offset).strftime(sig.TIMESTAMP_FORMAT)
    assert sig.check_timestamp(stamp, now=NOW) == NOW + offset


@pytest.mark.parametrize("offset", [timedelta(minutes=15, seconds=1), -timedelta(hours=1)])
def test_it_rejects_a_timestamp_outside_15_minutes(offset):
    with pytest.raises(sig.SignatureError) as caught:
        sig.check_timestamp((NOW + offset).strftime(sig.TIMESTAMP_FORMAT), now=NOW)
    assert caught.value.code == "InvalidTimeStamp.Expired"


@pytest.mark.parametrize("value", [None, "", "yesterday", "2026-11-29 10:00:00"])
def test_it_rejects_a_malformed_timestamp(value):
    with pytest.raises(sig.SignatureError) as caught:
        sig.check_timestamp(value, now=NOW)
    assert caught.value.code == "InvalidTimeStamp.Format"


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "IncompleteSignature"),
        ("Bearer abc", "IncompleteSignature"),
        ("ACS3-HMAC-SHA256 Credential=AK,SignedHeaders=host", "IncompleteSignature"),
        ("ACS3-HMAC-SM3 Credential=AK,SignedHeaders=host,Signature=00ff", "InvalidSignatureMethod"),
    ],
)
def test_it_rejects_a_malformed_authorization(header, code):
    with pytest.raises(sig.SignatureError) as caught:
        sig.parse_authorization(header)
    assert caught.value.code == code


def test_it_parses_the_authorization_header():
    auth = sig.parse_authorization(
        "ACS3-HMAC-SHA256 Credential=LTAI5tX,SignedHeaders=host;x-acs-date,Signature=ABCdef01"
    )
    assert auth == sig.Authorization(
        "ACS3-HMAC-SHA256", "LTAI5tX", ("host", "x-acs-date"), "abcdef01"
    )


@pytest.mark.parametrize("name", ["x-acs-date", "x-acs-signature-nonce", "host"])
def test_it_requires_date_nonce_and_host_to_be_signed(name):
    request = VECTORS["get-job"]
    unsigned = sig.SignedRequest(
        request.method,
        request.path,
        request.query,
        {k: v for k, v in request.headers.items() if k != name},
    )
    auth = _signed(unsigned)
    with pytest.raises(sig.SignatureError) as caught:
        sig.check_signed_headers(auth, request)
    assert caught.value.code == "IncompleteSignature"
    with pytest.raises(sig.SignatureError) as caught:
        sig.check_signed_headers(auth, unsigned)
    assert caught.value.code == "MissingParameter"
