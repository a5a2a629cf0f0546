"""The WSGI entry point's request: header trouble found while Django builds the request is
left for the views to answer (a 400), instead of escaping every handler as a 500.

Django builds the request before any middleware or view runs, and two things can raise
there: a Content-Type it cannot parse (BadRequest), and a Content-Type with a charset, whose
setter re-decodes the query string at once, so more than DATA_UPLOAD_MAX_NUMBER_FIELDS query
parameters raise TooManyFieldsSent. Here the first becomes a request without a content type
(no form body is read from it; the API reads its JSON body whatever the header says) and the
second is raised again, where the views handle it, when they first read `request.GET`.
"""

from __future__ import annotations

from django.core.exceptions import BadRequest, TooManyFieldsSent
from django.core.handlers.wsgi import WSGIHandler, WSGIRequest


class Request(WSGIRequest):
    def _set_content_type_params(self, meta) -> None:
        try:
            super()._set_content_type_params(meta)
        except BadRequest:  # the header does not parse: as if there were none
            self.content_type, self.content_params = "", {}
        except TooManyFieldsSent:  # raised from the encoding's setter, which is set by now
            pass


class Handler(WSGIHandler):
    request_class = Request


def application() -> Handler:
    """What `django.core.wsgi.get_wsgi_application` does, with this request class."""
    import django

    django.setup(set_prefix=False)
    return Handler()
