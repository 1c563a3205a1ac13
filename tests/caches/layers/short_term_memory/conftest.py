"""Fixtures for the short-term memory tests: a fake clock, the process store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
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


@pytest.fixture
async def stm_store() -> AsyncIterator[short_term_memory.ShortTermMemoryStore]:
    """Return the process store; flush its durable writes after the test."""
    store = short_term_memory.short_term_memory_store()
    yield store
    await store.writer.flush()
