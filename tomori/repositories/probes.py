"""Service probes for the health URLs: one round trip to the database."""

from __future__ import annotations

from django.db import connections


def ping_database(alias: str = "default") -> None:
    """Run `SELECT 1` on this thread's connection, then close it (raises when down)."""
    connection = connections[alias]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()
