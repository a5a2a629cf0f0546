"""Reads of workspaces: the ones a user belongs to, their roles, owners and administrators."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from apps.core.db import ReusedSql
from apps.workspaces.models import Membership, UserPreference, Workspace

# The roles that run a workspace: DLC's AdminNames, and who manages every job in it.
MANAGING_ROLES = frozenset({Membership.Role.OWNER, Membership.Role.ADMIN})


def workspace_list(*, user) -> QuerySet[Workspace]:
    """Workspaces the user is a member of (every one for a superuser)."""
    if not user.is_authenticated:
        return Workspace.objects.none()
    if user.is_superuser:
        return Workspace.objects.all()
    return Workspace.objects.filter(membership__user=user).distinct()


def workspace_default(*, user) -> Workspace | None:
    """The user's first workspace (by name): the console's until the user picks another in
    the switcher, the API's IsDefault one."""
    return workspace_list(user=user).first()


def _user_workspace(is_superuser: bool, *, user_id: int, pk: int) -> QuerySet[Workspace]:
    """`workspace_list`'s SQL depends on the user through is_superuser and the id only."""
    user = get_user_model()(pk=user_id, is_superuser=is_superuser)
    return workspace_list(user=user).filter(pk=pk)


_user_workspace_sql = ReusedSql(_user_workspace, user_id=int, pk=int)


def workspace_for_user(*, user, workspace_id) -> Workspace | None:
    """The workspace by id if the user is a member of it (any, for a superuser); else None.
    Every CreateJob reads it: its SQL is built once (`ReusedSql`)."""
    try:
        pk = int(workspace_id)
    except (TypeError, ValueError):
        return None
    if not user.is_authenticated or not -(2**63) <= pk < 2**63:
        return None
    found = _user_workspace_sql(user.is_superuser, user_id=user.pk, pk=pk)
    return found[0] if found else None


def workspace_role(*, user, workspace_id: int) -> str | None:
    """The user's Membership role in the workspace (owner, admin, member); None outside it."""
    if not user.is_authenticated:
        return None
    return (
        Membership.objects.filter(user=user, workspace_id=workspace_id)
        .values_list("role", flat=True)
        .first()
    )


@dataclass(frozen=True)
class WorkspaceAdmins:
    """A workspace's owners and administrators, in the order they joined."""

    memberships: list[Membership] = field(default_factory=list)  # each with its user

    @property
    def usernames(self) -> list[str]:
        return [m.user.get_username() for m in self.memberships]

    @property
    def owner(self) -> Membership | None:
        """The first owner (a workspace made by hand may have none)."""
        return next((m for m in self.memberships if m.role == Membership.Role.OWNER), None)


def workspace_admins(*, workspaces: Iterable[Workspace]) -> dict[int, WorkspaceAdmins]:
    """Per id of each of `workspaces`: its owners and administrators. One query."""
    ids = [w.pk for w in workspaces]
    admins: dict[int, WorkspaceAdmins] = {pk: WorkspaceAdmins() for pk in ids}
    for membership in (
        Membership.objects.filter(workspace_id__in=ids, role__in=sorted(MANAGING_ROLES))
        .select_related("user")
        .order_by("pk")
    ):
        admins[membership.workspace_id].memberships.append(membership)
    return admins


def user_language(*, user) -> str:
    """The language the user saved ("" if none: their browser's is used)."""
    return UserPreference.objects.filter(user=user).values_list("language", flat=True).first() or ""


def user_time_zone(*, user) -> str:
    """The time zone the user saved ("" if none: their browser's is used)."""
    return (
        UserPreference.objects.filter(user=user).values_list("time_zone", flat=True).first() or ""
    )
