"""A client of the test database that is not Django: as psql or another service writes."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connection


def outside_client(*, application_name: str = "psql") -> psycopg.Connection[Any]:
    """Return an autocommit psycopg connection to Django's test database (close it)."""
    params = connection.settings_dict
    return psycopg.connect(
        host=params["HOST"] or "127.0.0.1",
        port=int(params["PORT"] or 5432),
        user=params["USER"] or "postgres",
        password=params["PASSWORD"] or None,
        dbname=params["NAME"],
        autocommit=True,
        application_name=application_name,
    )


def registry_follower() -> Any:
    """Return an outbox follower applying what it reads to this process's registry.

    Poll it by hand (`poll_once()`; the first poll starts at the newest row).
    """
    from caches import bus
    from caches.outbox import OutboxFollower
    from caches.registry import registry

    return OutboxFollower(
        deliver=lambda rows: [bus.apply_to_registry(list(row[0])) for row in rows],
        flush=lambda reason: registry.clear_invalidatable(),
        interval=0.5,
        retention=3600.0,
    )
