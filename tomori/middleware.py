"""Answer 503 with a plain explanation, not a 500, when the database cannot be reached."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.html import escape

from caches.operations.faults import DATABASE_ERRORS, database_fault

logger = logging.getLogger(__name__)

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Database unreachable</title></head>
<body><h1>Database unreachable</h1>
<p>The admin cannot reach its database, so it can neither sign you in nor show
stored data (domain tables, metric samples). Nothing was changed. The bot
workers keep serving from their caches; try again once the database is back.</p>
<p><code>{error}</code></p></body></html>
"""


class DatabaseUnavailableMiddleware:
    """Turn a lost database connection raised by a view into a 503 page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(
        self, request: HttpRequest, exception: Exception
    ) -> HttpResponse | None:
        """Return the 503 page for OperationalError/InterfaceError, else let Django handle it."""
        if not isinstance(exception, DATABASE_ERRORS):
            return None
        error = database_fault(exception)
        logger.warning("%s (serving %s)", error, request.path)
        response = HttpResponse(PAGE.format(error=escape(error)), status=503)
        response["Retry-After"] = "30"
        return response
