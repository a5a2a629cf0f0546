from __future__ import annotations

import functools
from urllib.parse import unquote

from django.conf import settings
from django.utils import timezone, translation
from django_htmx.http import HttpResponseClientRefresh

from apps.core.timezones import valid_zone
from apps.workspaces.selectors import (
    user_language,
    user_time_zone,
    workspace_default,
    workspace_for_user,
)

SESSION_KEY = "workspace_id"
ZONE_SESSION_KEY = "time_zone"  # the user's saved zone, "" for none (read once per session)
ZONE_COOKIE = "paiweb_tz"  # the browser's zone, set by paiweb.js
LANGUAGE_SESSION_KEY = "language"  # the user's saved language, "" for none
WORKSPACE_HEADER = "X-Workspace"  # the workspace a page was drawn for, on its htmx requests


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


def refreshes_on_workspace_switch(view):
    """A view whose htmx answer is a part of a page of the current workspace (the job list's
    poll and filters, the bills'): asked from a page drawn for another workspace (switched
    since, in another tab), it reloads that page whole (HX-Refresh). The part showed the new
    workspace's jobs under the header, and the filters, of the one the page was drawn for."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        drawn_for = request.headers.get(WORKSPACE_HEADER, "")
        if (
            getattr(request, "htmx", False)
            and drawn_for
            and request.workspace is not None
            and drawn_for != str(request.workspace.pk)
        ):
            return HttpResponseClientRefresh()
        return view(request, *args, **kwargs)

    return wrapper


def remember_time_zone(sender, request, user, **kwargs) -> None:
    """At sign-in, the user's saved zone and language go into the session: pages need not
    read them."""
    if request is not None and hasattr(request, "session"):
        request.session[ZONE_SESSION_KEY] = user_time_zone(user=user)
        request.session[LANGUAGE_SESSION_KEY] = user_language(user=user)


class LanguageMiddleware:
    """Pages speak the reader's language: the one they saved (their preference), else what
    LocaleMiddleware chose before it (the language cookie the switcher sets, else the
    browser's Accept-Language, else LANGUAGE_CODE)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            saved = request.session.get(LANGUAGE_SESSION_KEY)
            if saved is None:
                saved = request.session[LANGUAGE_SESSION_KEY] = user_language(user=user)
            if saved in dict(settings.LANGUAGES):
                translation.activate(saved)
                request.LANGUAGE_CODE = saved
        return self.get_response(request)


class TimezoneMiddleware:
    """Pages show times in the reader's zone: the one they saved (their preference), else
    their browser's (the cookie paiweb.js sets), else the server's TIME_ZONE. Sets
    request.time_zone (a ZoneInfo) and request.time_zone_source ("saved", "browser" or
    "server")."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone, source = None, "server"
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            saved = request.session.get(ZONE_SESSION_KEY)
            if saved is None:
                saved = request.session[ZONE_SESSION_KEY] = user_time_zone(user=user)
            zone = valid_zone(saved)
            source = "saved" if zone is not None else source
        if zone is None:
            zone = valid_zone(unquote(request.COOKIES.get(ZONE_COOKIE, "")))
            source = "browser" if zone is not None else source
        if zone is None:
            zone = valid_zone(settings.TIME_ZONE) or valid_zone("UTC")
        request.time_zone, request.time_zone_source = zone, source
        timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
