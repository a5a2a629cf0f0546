from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from apps.core.timezones import zone_label
from apps.workspaces.selectors import workspace_list


def workspaces(request) -> dict:
    user = getattr(request, "user", None)
    return {
        "current_workspace": getattr(request, "workspace", None),
        "user_workspaces": workspace_list(user=user) if user is not None else [],
        # Flower is for platform staff only: nobody else is even told where it is.
        "flower_url": settings.FLOWER_URL if getattr(user, "is_staff", False) else "",
        # the zone every time on the page is in (TimezoneMiddleware), for the header
        "time_zone": getattr(request, "time_zone", None),
        "time_zone_source": getattr(request, "time_zone_source", "server"),
        "time_zone_label": (
            zone_label(request.time_zone, timezone.now()) if hasattr(request, "time_zone") else ""
        ),
    }
