"""What an operator is told when Redis or the database cannot be reached."""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

#: The errors of a database that cannot be reached (refused, dropped, timed out).
DATABASE_ERRORS = (OperationalError, InterfaceError)
MAX_ERROR_CHARS = 300


def database_fault(exc: BaseException) -> str:
    """Return "database unreachable: <the error on one line>"."""
    text = " ".join(str(exc).split())[:MAX_ERROR_CHARS] or type(exc).__name__
    return f"database unreachable: {text}"


def first_line(exc: BaseException) -> str:
    """Return the error's first line alone (or its type's name when it says nothing).

    PostgreSQL's message goes on with the statement (`LINE 1: SELECT ...`) and
    a caret under the culprit: a log line that names the fault needs none of it.
    """
    lines = str(exc).strip().splitlines()
    return lines[0].strip()[:MAX_ERROR_CHARS] if lines else type(exc).__name__
