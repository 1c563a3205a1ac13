"""CompositeCache and StaleFallbackCache: member accounting and the last-good generation rule."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from caches.core import MISSING, BoundedTTLCache, DoNotCache, FakeClock
from caches.layers._support import CompositeCache, StaleFallbackCache, cached


def bounded(name: str, *, maxsize: int = 10, ttl: float | None = 10.0) -> Any:
    """Build a small cache on its own fake clock."""
    return BoundedTTLCache(name, maxsize=maxsize, ttl=ttl, clock=FakeClock())


@pytest.fixture
def composite() -> CompositeCache:
    """A primary map (cap 10) with a gate (cap 5) and an errors map (cap 3)."""
    return CompositeCache(
        bounded("main"),
        gate=bounded("gate", maxsize=5),
        errors=bounded("err", maxsize=3),
    )


def fill(composite: CompositeCache, primary: int, gate: int, errors: int) -> None:
    """Put this many entries into each member of `composite`."""
    for i in range(primary):
        composite.primary.set(("p", i), i)
    for i in range(gate):
        composite.members["gate"].set(i, True)
    for i in range(errors):
        composite.members["errors"].set(i, "down")


class Gate:
    """A loader that returns `value` once released."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self) -> Any:
        self.started.set()
        await self.release.wait()
        return self.value


# ------------------------------------------------------------ CompositeCache


def test_composite_len_counts_every_member(composite):
    fill(composite, primary=2, gate=3, errors=1)
    assert len(composite) == 6


def test_composite_clear_returns_the_entries_of_every_member(composite):
    fill(composite, primary=2, gate=3, errors=1)
    assert composite.clear() == 6
    assert all(len(cache) == 0 for cache in composite.maps().values())


def test_composite_invalidate_drops_the_key_everywhere_and_counts_it(composite):
    composite.primary.set(7, "value")
    composite.members["gate"].set(7, True)
    composite.members["errors"].set(8, "down")
    assert composite.invalidate(7) == 2
    assert all(7 not in cache for cache in composite.maps().values())
    assert len(composite) == 1


def test_composite_stats_sum_sizes_and_caps_with_a_breakdown(composite):
    fill(composite, primary=2, gate=3, errors=1)
    stats = composite.stats()
    assert stats["size"] == 6 and stats["cap"] == 18
    assert stats["members"] == {"primary": 2, "gate": 3, "errors": 1}
    assert stats["member_caps"] == {"primary": 10, "gate": 5, "errors": 3}
    assert stats["name"] == "main"


def test_composite_stats_sum_entry_counters(composite):
    for i in range(7):  # two evictions past the gate's cap of 5
        composite.members["gate"].set(i, True)
    composite.primary.set("k", 1)
    composite.invalidate("k")
    stats = composite.stats()
    assert stats["evictions"] == 2 and stats["invalidations"] == 1
    assert stats["last_invalidation"] is not None


def test_composite_clear_expired_covers_every_member():
    clock = FakeClock()
    composite = CompositeCache(
        BoundedTTLCache("main", maxsize=10, ttl=10, clock=clock),
        gate=BoundedTTLCache("gate", maxsize=10, ttl=5, clock=clock),
    )
    composite.primary.set(1, 1)
    composite.members["gate"].set(1, True)
    clock.advance(6)
    assert composite.clear_expired() == 1
    clock.advance(5)
    assert composite.clear_expired() == 1
    assert len(composite) == 0


# ------------------------------------------------------------ StaleFallbackCache


@pytest.fixture
def stale_cache() -> StaleFallbackCache:
    """A stale-fallback cache keeping last good values for 100 s."""
    return StaleFallbackCache(bounded("state"), retention=100.0)


async def test_clean_load_is_remembered_as_last_good(stale_cache):
    loader = Gate("NEW")
    loader.release.set()
    assert await stale_cache.get_or_load(2, loader) == "NEW"
    assert stale_cache.stale(2) == "NEW" and stale_cache.get(2) == "NEW"


async def test_do_not_cache_result_is_not_remembered(stale_cache):
    async def fallback() -> Any:
        return DoNotCache("fallback")

    assert await stale_cache.get_or_load(1, fallback) == "fallback"
    assert stale_cache.stale(1) is MISSING and len(stale_cache) == 0


async def test_load_overlapping_an_invalidation_is_not_remembered(stale_cache):
    loader = Gate("OLD")
    load = asyncio.create_task(stale_cache.get_or_load(1, loader))
    await loader.started.wait()
    stale_cache.invalidate(1)  # an admin edit lands while the load reads OLD
    loader.release.set()
    assert await load == "OLD"  # its waiter still gets the value
    assert stale_cache.get(1) is MISSING
    assert stale_cache.stale(1) is MISSING  # a later outage must not serve it


async def test_load_overlapping_a_clear_is_not_remembered(stale_cache):
    loader = Gate("OLD")
    load = asyncio.create_task(stale_cache.get_or_load(1, loader))
    await loader.started.wait()
    stale_cache.clear()
    loader.release.set()
    assert await load == "OLD"
    assert stale_cache.stale(1) is MISSING and len(stale_cache) == 0


async def test_late_stale_load_does_not_overwrite_the_newer_one(stale_cache):
    old, new = Gate("OLD"), Gate("NEW")
    first = asyncio.create_task(stale_cache.get_or_load(1, old))
    await old.started.wait()
    stale_cache.invalidate(1)
    new.release.set()
    assert await stale_cache.get_or_load(1, new) == "NEW"
    old.release.set()
    assert await first == "OLD"
    assert stale_cache.stale(1) == "NEW" and stale_cache.get(1) == "NEW"


async def test_unrelated_invalidation_keeps_the_load_remembered(stale_cache):
    loader = Gate("V")
    load = asyncio.create_task(stale_cache.get_or_load(1, loader))
    await loader.started.wait()
    stale_cache.invalidate(2)
    loader.release.set()
    assert await load == "V"
    assert stale_cache.stale(1) == "V"


async def test_invalidation_keeps_the_last_good_copy_for_a_failed_reload(stale_cache):
    loader = Gate("V")
    loader.release.set()
    await stale_cache.get_or_load(1, loader)
    assert stale_cache.invalidate(1) == 1  # the fresh entry only
    assert stale_cache.get(1) is MISSING  # the next read must load
    assert stale_cache.stale(1) == "V"
    assert stale_cache.stats()["stale_entries"] == 0  # kept, not served yet
    assert stale_cache.fallback(1) == "V"
    assert stale_cache.stats()["stale_entries"] == 1


async def test_successful_reload_ends_the_stale_count(stale_cache):
    first, second = Gate("V1"), Gate("V2")
    first.release.set()
    second.release.set()
    await stale_cache.get_or_load(1, first)
    stale_cache.invalidate(1)
    stale_cache.fallback(1)
    assert await stale_cache.get_or_load(1, second) == "V2"
    assert stale_cache.stale(1) == "V2" and stale_cache.stale_entries() == 0


async def test_reload_the_layer_does_not_cache_drops_the_last_good_copy(stale_cache):
    loader = Gate("V")
    loader.release.set()
    await stale_cache.get_or_load(1, loader)
    stale_cache.invalidate(1)

    async def gone() -> Any:
        return DoNotCache(None)

    assert await stale_cache.get_or_load(1, gone) is None
    assert stale_cache.stale(1) is MISSING


async def test_stale_count_forgets_keys_whose_copy_expired(stale_cache):
    loader = Gate("V")
    loader.release.set()
    await stale_cache.get_or_load(1, loader)
    stale_cache.fallback(1)
    stale_cache.primary.clock.advance(101)  # past the 100 s retention
    assert stale_cache.stale_entries() == 0


def test_clear_drops_the_last_good_copies_and_the_stale_count(stale_cache):
    stale_cache.last_good.set(1, "V")
    stale_cache.fallback(1)
    assert stale_cache.clear() == 1
    assert stale_cache.stale(1) is MISSING and stale_cache.stale_entries() == 0


async def test_failed_load_leaves_the_last_good_copy(stale_cache):
    loader = Gate("V")
    loader.release.set()
    await stale_cache.get_or_load(1, loader)
    stale_cache.primary.invalidate(1)  # as if its TTL passed

    async def down() -> Any:
        raise ConnectionError("database down")

    with pytest.raises(ConnectionError):
        await stale_cache.get_or_load(1, down)
    assert stale_cache.stale(1) == "V"


# ------------------------------------------------------------ cached()


async def test_cached_hit_then_miss_count_once_each():
    cache = bounded("c")
    cache.set("hit", 1)
    assert cached(cache, "hit") == 1
    assert cached(cache, "miss") is MISSING

    async def load() -> int:
        return 2

    assert await cache.get_or_load("miss", load) == 2
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["loads"]) == (1, 1, 1)
