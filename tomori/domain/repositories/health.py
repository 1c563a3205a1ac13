"""Database health for the bot worker: drop a connection an outage broke, and ping."""

from __future__ import annotations

from django.db import connections


def drop_broken_connections() -> int:
    """Close this thread's connections the driver reports broken; return how many.

    Django reconnects only at a request boundary, which the bot worker never
    has: without this, a connection cut by an outage fails every query ("the
    connection is closed") long after the database is back. A connection in
    an atomic block is left alone (closing it would break the transaction).
    """
    closed = 0
    for conn in connections.all(initialized_only=True):
        raw = conn.connection
        if raw is None or conn.in_atomic_block:
            continue
        if getattr(raw, "closed", False) or getattr(raw, "broken", False):
            conn.close()
            closed += 1
    return closed


def ping_database() -> None:
    """Run `SELECT 1` on the default database (after dropping a broken connection)."""
    drop_broken_connections()
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")


def probe_database(alias: str = "default") -> None:
    """Run `SELECT 1` on a connection of its own, then close it (raises when down).

    For the admin's readiness URL: a probe thread must not keep a connection.
    """
    connection = connections[alias]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()
