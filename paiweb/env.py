"""Typed, validated readers for environment variables.

Each reader returns the default when the variable is unset or empty, and raises
ImproperlyConfigured with the variable's name when a value cannot be parsed, so a
typo in a deployment fails at start-up instead of behaving oddly later.
"""

from __future__ import annotations

import math
import os
from urllib.parse import ParseResult

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, "") or default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}: expected true or false, got {raw!r}")


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a number, got {raw!r}") from None
    if not math.isfinite(value):  # nan compares false with every minimum
        raise ImproperlyConfigured(f"{name}: expected a number, got {raw!r}")
    if value < minimum:
        raise ImproperlyConfigured(f"{name}: must be ≥ {minimum}, got {value}")
    return value


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = env_float(name, default, minimum=minimum)
    if value != int(value):
        raise ImproperlyConfigured(f"{name}: expected a whole number, got {value}")
    return int(value)


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str) -> dict:
    """Django DATABASES entry for a postgres:// or sqlite:/// URL."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        _url_port("DATABASE_URL", parsed)
        if not parsed.path.lstrip("/"):
            raise ImproperlyConfigured(
                "DATABASE_URL: no database name, expected postgres://user:password@host:5432/name"
            )
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            # A process frozen or cut off inside a transaction (SIGSTOP, a lost host) must
            # not hold its row locks for ever: the server ends such a session after a
            # minute, and the watchdog that fails the lost host's pods can lock them.
            # Parameters bound on the server, and a statement run twice on a connection is
            # prepared there: PostgreSQL plans each of the API's reads once per connection,
            # not once per request (a GetJob's database CPU 2.4 -> 0.7-1.0 ms,
            # benchmarks/api_load.py).
            "OPTIONS": {
                "options": "-c idle_in_transaction_session_timeout=60000",
                "server_side_binding": True,
                "prepare_threshold": 2,
            },
        }
    if parsed.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parsed.path) or ":memory:"}
    raise ImproperlyConfigured(
        f"DATABASE_URL: unsupported scheme {parsed.scheme!r}, expected postgres:// or sqlite:///"
    )


def redis_url(url: str) -> str:
    """REDIS_URL checked: redis://, rediss:// (TLS) or unix:// (a socket path), with a numeric
    port; the client libraries would otherwise fail on it later, without naming it."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if parsed.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"REDIS_URL: unsupported scheme {parsed.scheme!r}, expected redis://host:6379/0, "
            "rediss:// or unix:///path/to/redis.sock"
        )
    if parsed.scheme == "unix" and not parsed.path:
        raise ImproperlyConfigured("REDIS_URL: no socket path, expected unix:///path/to/redis.sock")
    if parsed.scheme != "unix" and not parsed.hostname:
        raise ImproperlyConfigured("REDIS_URL: no host, expected redis://host:6379/0")
    _url_port("REDIS_URL", parsed)
    return url


def _url_port(name: str, parsed: ParseResult) -> None:
    """The URL's port must be a number (the message never repeats the URL: it may hold a
    password)."""
    try:
        parsed.port  # noqa: B018 (urllib parses the port on access)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: the port is not a number from 0 to 65535") from None


def settings_or_exit(status: int = 1) -> None:
    """Load the settings now. A deployment setting they refuse (ImproperlyConfigured, which
    names the variable) ends the process with that message alone and `status`, not with a
    traceback through Django's and importlib's frames that buries it."""
    import sys

    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018 (the first access imports the settings module)
    except ImproperlyConfigured as exc:
        print(f"paiweb: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(status) from None
