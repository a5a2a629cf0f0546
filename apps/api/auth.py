"""Who is calling: an AccessKey pair, proven by an ACS3-HMAC-SHA256 signature.

The key acts as its user. Checks run cheapest first and the nonce is claimed last, so a
request with a bad signature cannot burn somebody else's nonce.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from urllib.parse import quote

import redis
from cryptography.fernet import InvalidToken
from django.http import HttpRequest
from django.views.decorators.debug import sensitive_variables

from apps.api import signature
from apps.core.errors import ApplicationError
from apps.core.redis import redis_client
from apps.workspaces.models import AccessKey

logger = logging.getLogger(__name__)

# A nonce is remembered longer than a timestamp stays acceptable (±15 minutes).
NONCE_TTL_SECONDS = 1800
LAST_USED_RESOLUTION = timedelta(minutes=1)

_STATUS = {"InvalidAccessKeyId.NotFound": 404}


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


@sensitive_variables("secret")
def authenticate(request: HttpRequest, *, now: datetime) -> AccessKey:
    """The enabled AccessKey that signed `request`, or an ApplicationError saying why not."""
    signed = signed_request(request)
    try:
        auth = signature.parse_authorization(request.headers.get("Authorization"))
        signature.check_signed_headers(auth, signed)
        signature.check_timestamp(signed.headers.get("x-acs-date"), now=now)
    except signature.SignatureError as error:
        raise _refusal(error) from None

    key = next(iter(AccessKey.objects.select_related("user")
                    .filter(key_id=auth.access_key_id).order_by()[:1]), None)
    if key is None:
        raise ApplicationError(
            "InvalidAccessKeyId.NotFound", "Specified access key is not found.", status=404
        )
    if not key.enabled or not key.user.is_active:
        raise ApplicationError("InvalidAccessKeyId.Inactive", "Specified access key is disabled.")
    try:
        secret = key.secret()
    except InvalidToken:
        # The encryption secret changed since the key was made: nothing the caller can fix.
        logger.error("AccessKey %s cannot be decrypted; re-issue it", key.key_id)
        raise ApplicationError(
            "InvalidAccessKeyId.Inactive",
            "Specified access key can no longer be verified: it was created under another "
            "encryption secret. Create a new AccessKey in the console (Access keys).",
        ) from None
    try:
        raw = _raw_path(request)
        signature.verify(signed, auth, secret=secret, paths=[raw] if raw else [])
    except signature.SignatureError as error:
        raise _refusal(error) from None

    _claim_nonce(key.key_id, signed.headers["x-acs-signature-nonce"])
    _touch(key, now)
    return key


def _claim_nonce(key_id: str, nonce: str) -> None:
    try:
        fresh = redis_client().set(f"api:nonce:{key_id}:{nonce}", 1, nx=True, ex=NONCE_TTL_SECONDS)
    except redis.RedisError:
        logger.exception("Redis is unavailable: cannot check signature nonces")
        raise ApplicationError(
            "ServiceUnavailable", "The service is temporarily unavailable.", status=503
        ) from None
    if not fresh:
        raise ApplicationError("SignatureNonceUsed", "Specified signature nonce was used already.")


def _touch(key: AccessKey, now: datetime) -> None:
    """Record use at most once a minute, so reads do not write on every call."""
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION:
        AccessKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
