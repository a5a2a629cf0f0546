"""Time zones as the console shows them: which names are zones, and how a zone is labelled.

Pages render times in the zone of the person reading them (`apps.workspaces.middleware.
TimezoneMiddleware` activates it), in one 24-hour format; the header names the zone.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones


@lru_cache(maxsize=1)
def zone_names() -> tuple[str, ...]:
    """Every IANA zone name this machine knows, sorted (for the preference's choices)."""
    return tuple(sorted(available_timezones()))


def valid_zone(name: str | None) -> ZoneInfo | None:
    """The zone of that IANA name ("Asia/Shanghai"), or None for anything else."""
    if not name or len(name) > 64 or name not in zone_names():
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def zone_label(zone: ZoneInfo, at: datetime) -> str:
    """ "Asia/Shanghai (UTC+08:00)": the zone and its offset at that moment."""
    offset = at.astimezone(zone).strftime("%z") or "+0000"
    return f"{zone.key} (UTC{offset[:3]}:{offset[3:]})"
