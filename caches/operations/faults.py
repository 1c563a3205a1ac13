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
