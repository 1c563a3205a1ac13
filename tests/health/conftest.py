"""Fixtures: the database behind a breakable proxy, Redis of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections

from caches import live


@pytest.fixture
def proxied_database(pg_proxy) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """Route the default connection (every thread's) through `pg_proxy`."""
    conn = connections["default"]
    saved = (conn.settings_dict["HOST"], conn.settings_dict["PORT"])
    conn.close()
    conn.settings_dict["HOST"], conn.settings_dict["PORT"] = "127.0.0.1", pg_proxy.port
    try:
        yield pg_proxy
    finally:
        pg_proxy.forward()
        conn.close()
        conn.settings_dict["HOST"], conn.settings_dict["PORT"] = saved


@pytest.fixture
def live_on(settings) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """Return a function pointing live snapshots at a Redis URL ("" for in-process)."""

    def point(url: str) -> None:
        settings.REDIS_URL = url
        live.reset_for_tests()

    point("")
    yield point
    live.reset_for_tests()
