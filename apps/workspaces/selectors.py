from __future__ import annotations

from django.db.models import QuerySet

from apps.workspaces.models import Workspace


def workspace_list(*, user) -> QuerySet[Workspace]:
    """Workspaces the user is a member of (every one for a superuser)."""
    if not user.is_authenticated:
        return Workspace.objects.none()
    if user.is_superuser:
        return Workspace.objects.all()
    return Workspace.objects.filter(membership__user=user).distinct()


def workspace_for_user(*, user, workspace_id) -> Workspace | None:
    try:
        return workspace_list(user=user).get(pk=int(workspace_id))
    except (Workspace.DoesNotExist, TypeError, ValueError):
        return None
