"""Who is calling: an AccessKey pair, proven by an ACS3-HMAC-SHA256 signature.

The key acts as its user. Checks run cheapest first and the nonce is claimed last, so a
request with a bad signature cannot burn somebody else's nonce. Bad signatures are throttled
(apps/core/throttle.py, the rule sign-ins use too) before any key is looked up.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import redis
from cryptography.fernet import InvalidToken
from django.conf import settings
from django.http import HttpRequest
from django.views.decorators.debug import sensitive_variables

from apps.api import signature
from apps.api.errors import throttling
from apps.core.auth import client_address, throttle_scope
from apps.core.db import ReusedSql
from apps.core.errors import ApplicationError
from apps.core.redis import redis_client
from apps.core.throttle import Check, Scope, throttle_check, throttle_fail, throttle_reset
from apps.core.words import say
from apps.workspaces.models import AccessKey

logger = logging.getLogger(__name__)

# A nonce is remembered longer than a timestamp stays acceptable (±15 minutes).
NONCE_TTL_SECONDS = 1800
LAST_USED_RESOLUTION = timedelta(minutes=1)

_STATUS = {"InvalidAccessKeyId.NotFound": 404}

# What guessing looks like: a signature made without the secret, or a key that does not exist.
# Counted per (key, address), per address and per key; over a limit, requests are refused
# with 429 before the key is looked up or the signature checked (docs/api.md, Throttling).
BAD_SIGNATURE_CODES = frozenset({"InvalidAccessKeyId.NotFound", "SignatureDoesNotMatch"})
API_KEY_ADDRESS, API_ADDRESS, API_KEY = "api-key-address", "api-address", "api-key"
_THROTTLED = {
    API_KEY_ADDRESS: (
        "Throttling.User",
        say("too many requests with a bad signature for this AccessKeyId from your address"),
    ),
    API_ADDRESS: ("Throttling", say("too many requests with a bad signature from your address")),
    API_KEY: (
        "Throttling.User",
        say("too many requests with a bad signature for this AccessKeyId"),
    ),
}


def signed_request(request: HttpRequest) -> signature.SignedRequest:
    """The parts of a Django request that the signature covers."""
    headers = {name.lower(): value for name, value in request.headers.items()}
    query = {name: value for name, value in request.GET.items()}
    return signature.SignedRequest(
        method=request.method or "GET",
        path=_encoded(request.path),
        query=query,
        headers=headers,
        body=request.body,
    )


def _encoded(path: str) -> str:
    """The SDK percent-encodes path parameters; Django hands the path over decoded."""
    return "/".join(quote(segment, safe="~") for segment in path.split("/"))


def _raw_path(request: HttpRequest) -> str | None:
    raw = request.META.get("RAW_URI") or request.META.get("REQUEST_URI")  # gunicorn, uWSGI
    return raw.split("?", 1)[0] if raw else None


def _refusal(error: signature.SignatureError) -> ApplicationError:
    return ApplicationError(error.code, error.message, status=_STATUS.get(error.code, 400))


def authenticate(request: HttpRequest, *, now: datetime) -> AccessKey:
    """The enabled AccessKey that signed `request`, or an ApplicationError saying why not."""
    signed = signed_request(request)
    try:
        auth = signature.parse_authorization(request.headers.get("Authorization"))
        signature.check_signed_headers(auth, signed)
        signature.check_timestamp(signed.headers.get("x-acs-date"), now=now)
    except signature.SignatureError as error:
        raise _refusal(error) from None

    scopes = _throttle_scopes(auth.access_key_id, client_address(request))
    check = _refuse_while_throttled(scopes, now)
    try:
        key = _key_that_signed(request, signed, auth)
    except ApplicationError as error:
        if error.code in BAD_SIGNATURE_CODES:
            _count_failure(scopes, now)
        raise
    _claim_nonce(key.key_id, signed.headers["x-acs-signature-nonce"])
    _touch(key, now)
    _reset_failures(check.to_reset(scopes[:1]))  # this caller from this address holds the secret
    return key


_key_sql = ReusedSql(
    lambda shape, key_id: AccessKey.objects.select_related("user").filter(key_id=key_id).order_by(),
    key_id=str,
)


@sensitive_variables("secret")
def _key_that_signed(
    request: HttpRequest, signed: signature.SignedRequest, auth: signature.Authorization
) -> AccessKey:
    keys = _key_sql(key_id=auth.access_key_id)
    key = keys[0] if keys else None
    if key is None:
        raise ApplicationError(
            "InvalidAccessKeyId.NotFound", say("Specified access key is not found."), status=404
        )
    if not key.enabled or not key.user.is_active:
        raise ApplicationError(
            "InvalidAccessKeyId.Inactive", say("Specified access key is disabled.")
        )
    try:
        secret = key.secret()
    except InvalidToken:
        # The encryption secret changed since the key was made: nothing the caller can fix.
        logger.error("AccessKey %s cannot be decrypted; re-issue it", key.key_id)
        raise ApplicationError(
            "InvalidAccessKeyId.Inactive",
            say(
                "Specified access key can no longer be verified: it was created under another "
                "encryption secret. Create a new AccessKey in the console (Access keys).",
            ),
        ) from None
    try:
        raw = _raw_path(request)
        signature.verify(signed, auth, secret=secret, paths=[raw] if raw else [])
    except signature.SignatureError as error:
        raise _refusal(error) from None
    return key


def _throttle_scopes(key_id: str, address: str) -> list[Scope]:
    """(key, address) first and tight; the address; the key, looser (docs/api.md)."""
    return [
        throttle_scope(
            API_KEY_ADDRESS, f"{key_id} {address}", limit=settings.API_THROTTLE_PER_KEY_ADDRESS
        ),
        throttle_scope(API_ADDRESS, address, limit=settings.API_THROTTLE_PER_ADDRESS),
        throttle_scope(API_KEY, key_id, limit=settings.API_THROTTLE_PER_KEY),
    ]


def _refuse_while_throttled(scopes: list[Scope], now: datetime) -> Check:
    try:
        check = throttle_check(store=redis_client(), scopes=scopes, now=now.timestamp())
    except redis.RedisError:
        logger.exception("Redis is unavailable: cannot throttle bad signatures")
        raise _unavailable() from None
    if (lock := check.lock) is not None:
        code, reason = _THROTTLED[lock.scope.kind]
        retry_at = datetime.fromtimestamp(math.ceil(lock.until), UTC)
        raise throttling(
            code, reason, retry_at=retry_at, retry_after=lock.seconds_left(now.timestamp())
        )
    return check


def _count_failure(scopes: list[Scope], now: datetime) -> None:
    try:
        throttle_fail(store=redis_client(), scopes=scopes, now=now.timestamp())
    except redis.RedisError:
        logger.exception("Redis is unavailable: a bad signature was not counted")


def _reset_failures(scopes: list[Scope]) -> None:
    try:
        throttle_reset(store=redis_client(), scopes=scopes)
    except redis.RedisError:
        logger.exception("Redis is unavailable: bad signatures were not reset")


def _unavailable() -> ApplicationError:
    return ApplicationError(
        "ServiceUnavailable", say("The service is temporarily unavailable."), status=503
    )


def _claim_nonce(key_id: str, nonce: str) -> None:
    try:
        fresh = redis_client().set(f"api:nonce:{key_id}:{nonce}", 1, nx=True, ex=NONCE_TTL_SECONDS)
    except redis.RedisError:
        logger.exception("Redis is unavailable: cannot check signature nonces")
        raise _unavailable() from None
    if not fresh:
        raise ApplicationError(
            "SignatureNonceUsed", say("Specified signature nonce was used already.")
        )


def _touch(key: AccessKey, now: datetime) -> None:
    """Record use at most once a minute, so reads do not write on every call."""
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION:
        AccessKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
