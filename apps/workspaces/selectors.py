from __future__ import annotations

from django.db.models import QuerySet

from apps.workspaces.models import Membership, Workspace


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


def workspace_role(*, user, workspace_id: int) -> str | None:
    """The user's Membership role in the workspace (owner, admin, member); None outside it."""
    if not user.is_authenticated:
        return None
    return (
        Membership.objects.filter(user=user, workspace_id=workspace_id)
        .values_list("role", flat=True)
        .first()
    )
