from __future__ import annotations

from datetime import datetime

from apps.core.models import Heartbeat


def heartbeat_record(*, name: str, now: datetime, detail: str = "") -> None:
    Heartbeat.objects.update_or_create(name=name, defaults={"last_seen": now, "detail": detail})
