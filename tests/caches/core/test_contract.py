"""Run the cache contract against every cache implementation in the core."""

from __future__ import annotations

import pytest

from tests.caches.core.contract import (
    ASYNC_CONTRACT,
    SYNC_CONTRACT,
    AsyncCheck,
    MakeCache,
    SyncCheck,
    check_id,
    check_managed_cache,
)


@pytest.mark.parametrize("check", SYNC_CONTRACT, ids=check_id)
def test_cache_meets_sync_contract(check: SyncCheck, cache_factory: MakeCache) -> None:
    check(cache_factory)


@pytest.mark.parametrize("check", ASYNC_CONTRACT, ids=check_id)
async def test_cache_meets_async_contract(
    check: AsyncCheck, cache_factory: MakeCache
) -> None:
    await check(cache_factory)


def test_cache_is_a_managed_cache(cache_factory: MakeCache, clock) -> None:
    cache = cache_factory(maxsize=10, ttl=10, clock=clock)
    cache.set("k", 1)
    check_managed_cache(cache)
