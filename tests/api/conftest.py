"""The API over real HTTP: pytest-django's live server, the official SDKs as the client.

The SDK-facing helpers work with both SDK generations: 1.4.17/3.0.1 (the seed's pins, on
alibabacloud_tea_openapi 0.3.x or 0.4.x) and the current releases.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from urllib.parse import urlencode, urlsplit

import pytest
import requests
from alibabacloud_aiworkspace20210204.client import Client as WorkspaceClient
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_tea_openapi.models import Config

from apps.api import signature
from tests.factories import make_access_key

ALICE_KEY = ("LTAI5tTestAlice00000001", "TestSecretAlice0000000000000001")
BOB_KEY = ("LTAI5tTestBob0000000001", "TestSecretBob00000000000000001")
CHARLIE_KEY = ("LTAI5tTestCharlie000001", "TestSecretCharlie0000000000001")


@pytest.fixture
def endpoint(live_server) -> str:
    """host:port of the live server, as the SDK's `endpoint` wants it."""
    return urlsplit(live_server.url).netloc


@pytest.fixture
def keys(personas) -> dict[str, tuple[str, str]]:
    for name, (key_id, secret) in (
        ("alice", ALICE_KEY),
        ("bob", BOB_KEY),
        ("charlie", CHARLIE_KEY),
    ):
        make_access_key(personas[name], key_id=key_id, secret=secret)
    return {"alice": ALICE_KEY, "bob": BOB_KEY, "charlie": CHARLIE_KEY}


def config(endpoint: str, key: tuple[str, str]) -> Config:
    return Config(
        access_key_id=key[0],
        access_key_secret=key[1],
        endpoint=endpoint,
        protocol="http",
        region_id="cn-hangzhou",
    )


@pytest.fixture
def dlc_for(endpoint, keys):
    """dlc_for("charlie") → a DLC client signing with charlie's key."""
    return lambda name: DLCClient(config(endpoint, keys[name]))


@pytest.fixture
def dlc(dlc_for) -> DLCClient:
    return dlc_for("alice")


@pytest.fixture
def aiworkspace(endpoint, keys) -> WorkspaceClient:
    return WorkspaceClient(config(endpoint, keys["alice"]))


@pytest.fixture
def ws_a(personas) -> str:
    return personas["ws_a"].workspace_id


def sdk_error(excinfo) -> tuple[str, int]:
    """(Code, HTTP status) from what either SDK generation raises: tea-openapi 0.4's
    ClientException (`code`, `status_code`) or 0.3's TeaException (`code`, `data`)."""
    error = excinfo.value
    status = getattr(error, "status_code", None)
    if status is None:
        status = (getattr(error, "data", None) or {}).get("statusCode")
    return error.code, status


class RawClient:
    """Signed requests built by hand (apps.api.signature, which the unit tests prove equal
    to the SDK's signer), so a test can tamper with any part of them."""

    def __init__(self, base_url: str, key: tuple[str, str]) -> None:
        self.base_url = base_url
        self.key_id, self.secret = key

    def headers(
        self,
        method: str,
        path: str,
        *,
        query=None,
        body: bytes = b"",
        date: datetime | None = None,
        nonce: str | None = None,
    ) -> dict[str, str]:
        headers = {
            "host": urlsplit(self.base_url).netloc,
            "x-acs-version": "2020-12-03",
            "x-acs-action": "Raw",
            "x-acs-date": (date or datetime.now(UTC)).strftime(signature.TIMESTAMP_FORMAT),
            "x-acs-signature-nonce": nonce or uuid.uuid4().hex,
            "x-acs-content-sha256": signature.hashed_payload(body),
            "accept": "application/json",
        }
        if body:
            headers["content-type"] = "application/json; charset=utf-8"
        request = signature.SignedRequest(method, path, query or {}, headers, body)
        headers["Authorization"] = signature.sign(
            request, access_key_id=self.key_id, secret=self.secret
        )
        return headers

    def send(
        self,
        method: str,
        path: str,
        *,
        query=None,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        url = self.base_url + path + (f"?{urlencode(query)}" if query else "")
        headers = (
            headers if headers is not None else self.headers(method, path, query=query, body=body)
        )
        return requests.request(method, url, data=body or None, headers=headers, timeout=30)


@pytest.fixture
def raw(live_server, keys) -> RawClient:
    return RawClient(live_server.url, keys["alice"])


def quota_job_body(workspace_id: str, **overrides) -> dict:
    """A CreateJob body for a 2-pod GPU job on quota team-a."""
    body = {
        "WorkspaceId": workspace_id,
        "DisplayName": "train-resnet",
        "JobType": "PyTorchJob",
        "ResourceId": "team-a",
        "JobSpecs": [
            {
                "Type": "Worker",
                "PodCount": 2,
                "Image": "pytorch:2.3",
                "ResourceConfig": {"CPU": "8", "Memory": "32Gi", "GPU": "2"},
            }
        ],
        "UserCommand": "python train.py",
    }
    return {**body, **overrides}


def spot_job_body(workspace_id: str, spot_spec: dict | None = None, **overrides) -> dict:
    body = {
        "WorkspaceId": workspace_id,
        "DisplayName": "sample-spot-job",
        "JobType": "PyTorchJob",
        "JobSpecs": [
            {
                "Type": "Worker",
                "PodCount": 1,
                "Image": "pytorch:2.3",
                "EcsSpec": "ecs.g7.xlarge",
                "SpotSpec": spot_spec
                or {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.4},
            }
        ],
        "UserCommand": "echo hi",
    }
    return {**body, **overrides}


@pytest.fixture
def create_job(dlc):
    """create_job(body, client=dlc) → JobId, through the SDK."""
    from alibabacloud_pai_dlc20201203.models import CreateJobRequest

    def create(body: dict, client=None) -> str:
        return (client or dlc).create_job(CreateJobRequest().from_map(body)).body.job_id

    return create


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """The personas' passwords are hashed per test; the API never checks them."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
