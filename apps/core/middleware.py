"""Requests no console view can answer, refused before any view or query sees them."""

from __future__ import annotations

from django.core.exceptions import BadRequest
from django.http import Http404

API_PREFIX = "/api/"  # the API answers in its own JSON shape and refuses NUL itself


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
