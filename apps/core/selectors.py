from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from apps.core.models import Heartbeat


@dataclass(frozen=True)
class Health:
    beat_last_seen: datetime | None
    beat_ok: bool
    workers: list[str]
    broker_ok: bool
    broker_error: str


def health_snapshot(*, now: datetime, ping_timeout: float = 1.0) -> Health:
    """Whether beat's heartbeat is fresh and which Celery workers answer a ping."""
    beat = Heartbeat.objects.filter(name="beat").first()
    stale_after = timedelta(seconds=max(3 * settings.HEARTBEAT_INTERVAL, 30))
    beat_ok = beat is not None and now - beat.last_seen <= stale_after
    workers: list[str] = []
    broker_ok, broker_error = True, ""
    try:
        from paiweb.celery import app

        # Fail fast when the broker is down instead of retrying for several seconds.
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=ping_timeout)
            replies = app.control.ping(timeout=ping_timeout, connection=conn) or []
        workers = sorted(name for reply in replies for name in reply)
    except Exception as exc:  # the panel reports the broker as down rather than erroring
        broker_ok, broker_error = False, f"{type(exc).__name__}: {exc}"
    return Health(
        beat_last_seen=beat.last_seen if beat else None,
        beat_ok=beat_ok,
        workers=workers,
        broker_ok=broker_ok,
        broker_error=broker_error,
    )
