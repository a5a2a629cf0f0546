from __future__ import annotations

from django.conf import settings

from apps.workspaces.selectors import workspace_list


def workspaces(request) -> dict:
    user = getattr(request, "user", None)
    return {
        "current_workspace": getattr(request, "workspace", None),
        "user_workspaces": workspace_list(user=user) if user is not None else [],
        # Flower is for platform staff only: nobody else is even told where it is.
        "flower_url": settings.FLOWER_URL if getattr(user, "is_staff", False) else "",
    }
