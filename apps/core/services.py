from __future__ import annotations

from datetime import datetime

from apps.core.models import Heartbeat


def heartbeat_record(
    *, name: str, now: datetime, detail: str = "", pods_watched_at: datetime | None = None
) -> None:
    """The loop `name` reported in at `now` (a node agent: with the start of its last
    complete watch round, `Heartbeat.pods_watched_at`)."""
    Heartbeat.objects.update_or_create(
        name=name,
        defaults={"last_seen": now, "detail": detail, "pods_watched_at": pods_watched_at},
    )
