from __future__ import annotations

from apps.workspaces.selectors import workspace_default, workspace_for_user

SESSION_KEY = "workspace_id"


class CurrentWorkspaceMiddleware:
    """Sets request.workspace: the one chosen in the switcher, else the user's first."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.workspace = None
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            chosen = request.session.get(SESSION_KEY)
            workspace = workspace_for_user(user=user, workspace_id=chosen) if chosen else None
            request.workspace = workspace or workspace_default(user=user)
        return self.get_response(request)
