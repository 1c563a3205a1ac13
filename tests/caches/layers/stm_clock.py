"""Fixtures the short-term memory and webhook tests share: a fake clock that moves
the store's stored timestamps too, and closing the database threads' connections."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from caches.core import FakeClock
from caches.database import close_thread_connections
from caches.layers import short_term_memory
from caches.registry import registry


@pytest.fixture(autouse=True)
def close_async_connections() -> Iterator[None]:
    """Close the connections of the database threads after each test.

    Async tests query from those threads; their connections must be closed so the
    test database can be dropped at the end of the session. (The registry,
    so every layer here, is rebuilt before each test by the suite's fixture.)
    """
    yield
    close_thread_connections()


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    """Drive every layer from a fake clock; stored timestamps move with it."""
    fake = FakeClock(start=1000.0)
    registry.set_clock(fake)
    store = short_term_memory.short_term_memory_store()
    origin = timezone.now()
    store.wall_clock = lambda: origin + timedelta(seconds=fake.now - 1000.0)
    yield fake
    store.wall_clock = timezone.now
