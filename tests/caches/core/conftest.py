"""Fixtures for the cache-core tests: a fake clock and the cache factories."""

from __future__ import annotations

from typing import Any

import pytest

from caches.core import BoundedTTLCache, FakeClock
from caches.registry import CacheRegistry
from tests.caches.core.contract import MakeCache


def make_bounded_ttl_cache(
    *, maxsize: int, ttl: float | None, clock: FakeClock
) -> BoundedTTLCache[Any, Any]:
    """Build a BoundedTTLCache for the contract suite."""
    return BoundedTTLCache("contract", maxsize=maxsize, ttl=ttl, clock=clock)


# Later cache implementations join the contract by adding their factory here.
CACHE_FACTORIES: list[MakeCache] = [make_bounded_ttl_cache]


@pytest.fixture(params=CACHE_FACTORIES, ids=lambda factory: factory.__name__)
def cache_factory(request: pytest.FixtureRequest) -> MakeCache:
    """Return a factory for each cache implementation under the contract."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def clock() -> FakeClock:
    """Return a fake clock starting at t=0."""
    return FakeClock()


@pytest.fixture
def fresh_registry() -> CacheRegistry:
    """Return an empty registry, separate from the process-wide one."""
    return CacheRegistry()
