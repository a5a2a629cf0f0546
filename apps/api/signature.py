"""ACS3-HMAC-SHA256, the request signature of Alibaba Cloud's V3 OpenAPI, both ways.

Pure Python (no Django): the API's authentication verifies with it, and tests and the
benchmark sign with it. It matches what `alibabacloud_tea_openapi` (0.3.x and 0.4.x, the
transport under both `alibabacloud_pai_dlc20201203` 1.4.17 and the current release) does
by default:

    CanonicalRequest = Method \n CanonicalURI \n CanonicalQueryString \n
                       CanonicalHeaders \n SignedHeaders \n HashedPayload
    StringToSign     = "ACS3-HMAC-SHA256" \n hex(sha256(CanonicalRequest))
    Signature        = hex(hmac_sha256(secret, StringToSign))
    Authorization    = ACS3-HMAC-SHA256 Credential=<AK>,SignedHeaders=<h1;h2>,Signature=<sig>

- CanonicalURI is the path as sent (path parameters percent-encoded), "/" when empty.
- CanonicalQueryString: the decoded parameters sorted by name, `name=quote(value, safe="~")`
  joined by "&"; parameter names are not encoded.
- CanonicalHeaders: `name:value\n` for each signed header, names lower-cased and sorted,
  values stripped (several values of one header sorted and joined by ",").
  The SDK signs every header it sets (host, x-acs-*, content-type, user-agent, accept);
  the verifier uses the client's SignedHeaders list, and requires the ones that matter.
- HashedPayload: hex(sha256(body)), also sent as `x-acs-content-sha256`. The verifier hashes
  the body it received, so a changed body never verifies.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

ALGORITHM = "ACS3-HMAC-SHA256"
MAX_CLOCK_SKEW = timedelta(minutes=15)
# Without these signed, a captured request could be replayed or re-dated.
REQUIRED_SIGNED_HEADERS = ("host", "x-acs-date", "x-acs-signature-nonce")
MAX_NONCE_LENGTH = 128
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

_CREDENTIAL = re.compile(
    r"^(?P<algorithm>\S+)\s+Credential=(?P<key>[^,\s]+),\s*SignedHeaders=(?P<headers>[^,\s]*),"
    r"\s*Signature=(?P<signature>[0-9a-fA-F]+)\s*$"
)


class SignatureError(Exception):
    """A request whose signature cannot be accepted; `code` is Alibaba Cloud's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SignedRequest:
    """What the signature covers. `headers` may use any case; `query` holds decoded values."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class Authorization:
    algorithm: str
    access_key_id: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str | None) -> Authorization:
    """Split an Authorization header; SignatureError("IncompleteSignature") if malformed."""
    match = _CREDENTIAL.match(value or "")
    if match is None:
        raise SignatureError(
            "IncompleteSignature",
            "The Authorization header must read "
            f"'{ALGORITHM} Credential=<AccessKeyId>,SignedHeaders=<names>,Signature=<hex>'.",
        )
    if match["algorithm"] != ALGORITHM:
        raise SignatureError(
            "InvalidSignatureMethod",
            f"Signature algorithm {match['algorithm']!r} is not supported; use {ALGORITHM}.",
        )
    names = tuple(n for n in match["headers"].split(";") if n)
    return Authorization(
        algorithm=ALGORITHM,
        access_key_id=match["key"],
        signed_headers=names,
        signature=match["signature"].lower(),
    )


def hashed_payload(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def canonical_query_string(query: Mapping[str, str | None]) -> str:
    pairs = sorted((k, v) for k, v in query.items() if v is not None)
    return "&".join(f"{k}={quote(str(v), safe='~')}" for k, v in pairs)


def _header_values(headers: Mapping[str, str]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for name, value in headers.items():
        if value is not None:
            values.setdefault(name.lower(), []).append(str(value).strip())
    return values


def canonical_headers(headers: Mapping[str, str], names: Iterable[str]) -> str:
    values = _header_values(headers)
    return "".join(f"{n}:{','.join(sorted(values.get(n, [''])))}\n" for n in sorted(names))


def canonical_request(
    request: SignedRequest, *, signed_headers: Iterable[str], payload_hash: str | None = None
) -> str:
    names = sorted(n.lower() for n in signed_headers)
    return "\n".join(
        [
            request.method.upper(),
            request.path or "/",
            canonical_query_string(request.query),
            canonical_headers(request.headers, names),
            ";".join(names),
            payload_hash if payload_hash is not None else hashed_payload(request.body),
        ]
    )


def string_to_sign(canonical: str) -> str:
    return f"{ALGORITHM}\n{hashlib.sha256(canonical.encode()).hexdigest()}"


def signature(secret: str, to_sign: str) -> str:
    return hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()


def sign(request: SignedRequest, *, access_key_id: str, secret: str) -> str:
    """The Authorization header for `request`, signing every header it carries (as the
    SDK does). The caller sets host, x-acs-date, x-acs-signature-nonce and
    x-acs-content-sha256 first."""
    names = sorted(_header_values(request.headers))
    canonical = canonical_request(request, signed_headers=names)
    value = signature(secret, string_to_sign(canonical))
    return (
        f"{ALGORITHM} Credential={access_key_id},SignedHeaders={';'.join(names)},Signature={value}"
    )


def check_signed_headers(auth: Authorization, request: SignedRequest) -> None:
    """The headers that pin time, nonce and host must be present and signed."""
    present = _header_values(request.headers)
    for name in REQUIRED_SIGNED_HEADERS:
        if name not in present:
            raise SignatureError("MissingParameter", f"The request lacks the header {name}.")
        if name not in auth.signed_headers:
            raise SignatureError("IncompleteSignature", f"The header {name} must be signed.")
    nonce = present["x-acs-signature-nonce"][0]
    if not nonce or len(nonce) > MAX_NONCE_LENGTH:
        raise SignatureError(
            "InvalidParameter", f"x-acs-signature-nonce must be 1 to {MAX_NONCE_LENGTH} characters."
        )


def check_timestamp(value: str | None, *, now: datetime) -> datetime:
    """Parse x-acs-date (UTC, 2026-11-29T10:00:00Z) and refuse one outside ±15 minutes."""
    try:
        moment = datetime.strptime(value or "", TIMESTAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise SignatureError(
            "InvalidTimeStamp.Format",
            f"x-acs-date {value!r} is not a UTC time such as 2026-11-29T10:00:00Z.",
        ) from None
    if abs(now - moment) > MAX_CLOCK_SKEW:
        raise SignatureError(
            "InvalidTimeStamp.Expired",
            f"Specified time stamp or date value is expired: x-acs-date {value} is more than "
            f"{int(MAX_CLOCK_SKEW.total_seconds() // 60)} minutes from the server's "
            f"{now.astimezone(UTC).strftime(TIMESTAMP_FORMAT)}.",
        )
    return moment


def verify(
    request: SignedRequest, auth: Authorization, *, secret: str, paths: Iterable[str] = ()
) -> None:
    """Raise SignatureDoesNotMatch unless `auth.signature` signs `request` with `secret`.

    `paths` are other spellings of the path to try (a proxy or server may hand the path
    over decoded); the first one that verifies wins.
    """
    payload = hashed_payload(request.body)
    claimed = _header_values(request.headers).get("x-acs-content-sha256")
    if claimed and claimed[0].lower() != payload:
        raise SignatureError(
            "SignatureDoesNotMatch",
            "x-acs-content-sha256 does not match the SHA-256 of the request body.",
        )
    first = None
    for path in dict.fromkeys([request.path, *paths]):
        candidate = SignedRequest(
            request.method, path, request.query, request.headers, request.body
        )
        to_sign = string_to_sign(
            canonical_request(candidate, signed_headers=auth.signed_headers, payload_hash=payload)
        )
        if hmac.compare_digest(signature(secret, to_sign), auth.signature):
            return
        first = first or to_sign
    raise SignatureError(
        "SignatureDoesNotMatch",
        "Specified signature is not matched with our calculation. The server's string to sign "
        f"is: {first!r}",
    )
