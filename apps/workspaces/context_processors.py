from __future__ import annotations

from django.conf import settings

from apps.workspaces.selectors import workspace_list


def workspaces(request) -> dict:
    user = getattr(request, "user", None)
    return {
        "current_workspace": getattr(request, "workspace", None),
        "user_workspaces": workspace_list(user=user) if user is not None else [],
        "flower_url": settings.FLOWER_URL,
    }
