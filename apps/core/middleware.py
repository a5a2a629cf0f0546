"""Requests no console view can answer, refused before any view or query sees them; and
requests whose session has ended: an htmx one sends the whole page to the sign-in page, a
form returns to its page, the create form with what was typed."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import BadRequest
from django.http import Http404, QueryDict
from django.shortcuts import render, resolve_url
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect

API_PREFIX = "/api/"  # the API answers in its own JSON shape and refuses NUL itself
UNSENT_FORM_KEY = "unsent_form"
KEEPS_UNSENT_FORM = frozenset(
    {"jobs:create", "whatif:index"}
)  # the forms long enough to be worth keeping


class RefuseNulMiddleware:
    """A NUL character in the path or the query string: 404 or 400, never a 500.

    The `str` path converter accepts any character but `/`, so a `%00` in /jobs/<job_id>/,
    /pods/<pod_id>/logs/ or /market/<name>/ reached the lookup, and PostgreSQL refuses text
    holding NUL (psycopg raises, the view answers 500; SQLite simply finds nothing). No id,
    name or filter value holds NUL, so such a request names nothing: the path answers 404
    and a query string 400, whichever view the URL resolves to.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path_info.startswith(API_PREFIX):
            if "\x00" in request.path_info:
                raise Http404("No such page")
            if _holds_nul(request.GET):
                raise BadRequest("The query string holds a NUL character")
        return self.get_response(request)


def _holds_nul(query) -> bool:
    return any("\x00" in key or any("\x00" in v for v in values) for key, values in query.lists())


class HtmxLoginRedirectMiddleware:
    """A request sent to sign in (its session expired, or ended in another tab) returns,
    once signed in, to the page it was on, as a whole page.

    An htmx request (a poll, a filter) takes the whole page to the sign-in page (HX-Redirect):
    htmx followed the redirect and swapped the sign-in page into the part it was updating, a
    second header and sign-in form inside the job list. A form's POST (Stop, Save as
    template) returns to the page it was sent from: signed in, the browser was sent on to the
    form's address with a GET, which answered 405 with a blank page. Listed after
    django_htmx's HtmxMiddleware."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code not in (301, 302):
            return response
        location = urlsplit(response["Location"])
        if location.path != resolve_url(settings.LOGIN_URL):
            return response
        if parse_qs(location.query).get(REDIRECT_FIELD_NAME) != [request.get_full_path()]:
            return response  # not login_required's "sign in for this request" (the switcher's)
        if getattr(request, "htmx", False):
            page = _same_site_page(request, request.headers.get("HX-Current-URL", ""))
            return HttpResponseClientRedirect(
                redirect_to_login(page or request.get_full_path())["Location"]
            )
        if request.method not in ("GET", "HEAD"):
            page = _same_site_page(request, request.headers.get("Referer", ""))
            _keep_unsent_form(request, page)
            return redirect_to_login(page or resolve_url(settings.LOGIN_REDIRECT_URL))
        return response


def _keep_unsent_form(request, page: str) -> None:
    """A long form sent to its own page (KEEPS_UNSENT_FORM) after the session ended: what
    was typed is kept in the new session, which signing in keeps, for the page to show again
    (`unsent_form`). Without it the create form came back empty after the sign-in."""
    match = request.resolver_match
    if match is None or match.view_name not in KEEPS_UNSENT_FORM:
        return
    if urlsplit(page).path != request.path:
        return
    fields = {
        name: values
        for name, values in request.POST.lists()
        if name != "csrfmiddlewaretoken" and "password" not in name
    }
    request.session[UNSENT_FORM_KEY] = {"path": request.path, "fields": fields}


def unsent_form(request) -> QueryDict | None:
    """The fields of this page's form that `_keep_unsent_form` kept (once: they are taken
    out of the session), or None."""
    kept = request.session.get(UNSENT_FORM_KEY)
    if not kept or kept.get("path") != request.path:
        return None
    del request.session[UNSENT_FORM_KEY]
    data = QueryDict(mutable=True)
    for name, values in kept["fields"].items():
        data.setlist(name, values)
    return data


def _same_site_page(request, url: str) -> str:
    """The path and query of `url` if it is on this site, else ""."""
    if not url or not url_has_allowed_host_and_scheme(
        url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return ""
    here = urlsplit(url)
    return f"{here.path}?{here.query}" if here.query else here.path


class MethodNotAllowedPageMiddleware:
    """A visit (GET) to an address that only takes a form's POST (/jobs/<id>/stop/, a
    bookmarked or typed one) answered 405 with an empty body, a blank page: the console's
    page says what the address is for. The API answers in its own shape."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code != 405
            or response.content
            or request.path_info.startswith(API_PREFIX)
            or request.method not in ("GET", "HEAD")
            or getattr(request, "htmx", False)
        ):
            return response
        page = render(request, "405.html", status=405)
        page["Allow"] = response.get("Allow", "")
        return page
