"""Fixtures for fault tests: the database thread's connections through a proxy we break."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection

from caches.database import close_thread_connections, database_calls
from caches.layers.short_term_memory import short_term_memory_store
from tests.support.faults import TcpProxy


def _close_database_thread() -> None:
    """Close the connections of the database threads (async tests query there)."""
    close_thread_connections(30)


@pytest.fixture
def db_through_proxy(pg_proxy: TcpProxy, transactional_db: None) -> Iterator[TcpProxy]:
    """Point new connections at `pg_proxy`; yield it to refuse or freeze."""
    params = connection.settings_dict  # shared by every thread's connection
    saved = params["HOST"], params["PORT"]
    _close_database_thread()
    params["HOST"], params["PORT"] = "127.0.0.1", pg_proxy.port
    try:
        yield pg_proxy
    finally:
        pg_proxy.forward()  # a frozen call finishes, so the thread is free
        _close_database_thread()
        params["HOST"], params["PORT"] = saved


@pytest.fixture(autouse=True)
def closed_breaker() -> Iterator[None]:
    """Start and end with a closed breaker on the real clock, and no kept writes."""
    calls = database_calls()
    calls.breaker.succeeded()
    calls.writes_breaker.succeeded()
    yield
    calls.breaker.succeeded()
    calls.writes_breaker.succeeded()
    calls.set_clock(time.monotonic)
    calls.checks.clock = time.monotonic
    calls.checks.reset_threads()  # their last calls were on the test's clock
    short_term_memory_store().writer._pending.clear()
