"""Fixtures for the short-term memory tests: a fake clock, the process store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from caches.layers import short_term_memory
from tests.caches.layers.stm_clock import clock, close_async_connections  # noqa: F401


@pytest.fixture
async def stm_store() -> AsyncIterator[short_term_memory.ShortTermMemoryStore]:
    """Return the process store; flush its durable writes after."""
    store = short_term_memory.short_term_memory_store()
    yield store
    await store.flush()
