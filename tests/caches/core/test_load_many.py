"""BoundedTTLCache.load_many: one loader call for many keys, each kept as a single load is."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from caches.core import BoundedTTLCache, FakeClock, refreshing


def cache_of(clock: FakeClock) -> BoundedTTLCache[str, str]:
    return BoundedTTLCache("bulk", maxsize=100, ttl=60, clock=clock)


class HeldLoader:
    """A bulk loader that returns "v-<key>" for every key once released."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, keys: list[str]) -> Mapping[str, str]:
        self.calls.append(keys)
        self.entered.set()
        await self.release.wait()
        return {key: f"v-{key}" for key in keys}


async def test_one_call_loads_what_is_neither_resident_nor_loading(
    fake_clock: FakeClock,
) -> None:
    cache = cache_of(fake_clock)
    cache.set("resident", "kept")
    loader = HeldLoader()
    loader.release.set()
    stored = await cache.load_many(["a", "resident", "b", "a"], loader)
    assert loader.calls == [["a", "b"]]
    assert stored == 2
    assert (cache.peek("a"), cache.peek("b"), cache.peek("resident")) == (
        "v-a",
        "v-b",
        "kept",
    )
    assert cache.stats()["in_flight"] == 0


async def test_a_key_invalidated_set_or_cleared_during_the_call_is_not_stored(
    fake_clock: FakeClock,
) -> None:
    cache = cache_of(fake_clock)
    loader = HeldLoader()
    load = asyncio.create_task(cache.load_many(["gone", "newer", "kept"], loader))
    await loader.entered.wait()
    cache.invalidate("gone")
    cache.set("newer", "set meanwhile")
    loader.release.set()
    assert await load == 1
    assert cache.peek("gone", None) is None
    assert cache.peek("newer") == "set meanwhile"
    assert cache.peek("kept") == "v-kept"

    loader = HeldLoader()
    load = asyncio.create_task(cache.load_many(["x", "y"], loader))
    await loader.entered.wait()
    cache.clear()
    loader.release.set()
    assert await load == 0
    assert len(cache) == 0


async def test_a_single_load_started_meanwhile_owns_its_key(
    fake_clock: FakeClock,
) -> None:
    """The bulk answer is older than that load's: even invalidated later, it stays out."""
    cache = cache_of(fake_clock)
    loader = HeldLoader()
    bulk = asyncio.create_task(cache.load_many(["k"], loader))
    await loader.entered.wait()
    single_release = asyncio.Event()

    async def single() -> str:
        await single_release.wait()
        return "single"

    one = asyncio.create_task(cache.get_or_load("k", single))
    await asyncio.sleep(0)  # the single load is registered
    cache.invalidate("k")  # a write after both reads began: both are stale
    loader.release.set()
    assert await bulk == 0
    single_release.set()
    assert await one == "single"  # its caller gets it; it is not stored
    assert cache.peek("k", None) is None


async def test_a_loader_error_stores_nothing_and_leaves_no_flight(
    fake_clock: FakeClock,
) -> None:
    cache = cache_of(fake_clock)

    async def failing(keys: list[str]) -> Mapping[str, str]:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        await cache.load_many(["a", "b"], failing)
    assert len(cache) == 0
    stats = cache.stats()
    assert (stats["in_flight"], stats["load_failures"]) == (0, 1)


async def test_a_key_the_loader_leaves_out_is_not_stored(fake_clock: FakeClock) -> None:
    cache = cache_of(fake_clock)

    async def some(keys: list[str]) -> Mapping[str, str]:
        return {"b": "v-b"}

    assert await cache.load_values(["a", "b"], some) == {"b": "v-b"}
    assert cache.peek("a", None) is None


async def test_only_the_room_under_the_cap_is_loaded(fake_clock: FakeClock) -> None:
    cache: BoundedTTLCache[str, str] = BoundedTTLCache(
        "bulk", maxsize=3, ttl=60, clock=fake_clock
    )
    cache.set("old", "kept")
    loader = HeldLoader()
    loader.release.set()
    assert await cache.load_many(["a", "b", "c", "d"], loader) == 2
    assert loader.calls == [["a", "b"]]  # nothing asked for past the room
    assert cache.peek("old") == "kept" and cache.stats()["evictions"] == 0


async def test_a_cancelled_call_lets_go_of_its_keys(fake_clock: FakeClock) -> None:
    cache = cache_of(fake_clock)
    loader = HeldLoader()
    load = asyncio.create_task(cache.load_many(["a"], loader))
    await loader.entered.wait()
    load.cancel()
    with pytest.raises(asyncio.CancelledError):
        await load
    assert cache.stats()["in_flight"] == 0 and len(cache) == 0
    loader = HeldLoader()
    loader.release.set()
    assert await cache.load_many(["a"], loader) == 1  # nothing still held


# ------------------------------------------------------------ refreshing()


async def test_a_refresh_reloads_the_resident_keys_only_each_with_a_fresh_deadline(
    fake_clock: FakeClock,
) -> None:
    cache = cache_of(fake_clock)  # ttl 60
    cache.set("held", "old")
    fake_clock.advance(50)
    loader = HeldLoader()
    loader.release.set()
    with refreshing():
        stored = await cache.load_many(["held", "absent"], loader)
    assert loader.calls == [["held"]]  # an absent key is not loaded
    assert stored == 1
    assert cache.peek("absent", None) is None
    fake_clock.advance(30)  # 80 s after the first set: past its first deadline
    assert cache.peek("held") == "v-held"
    stats = cache.stats()
    assert (stats["refreshes"], stats["loads"], stats["in_flight"]) == (1, 0, 0)
    fake_clock.advance(31)  # 61 s after the refresh
    assert cache.peek("held", None) is None


async def test_a_refresh_keeps_what_changed_while_it_ran(fake_clock: FakeClock) -> None:
    cache = cache_of(fake_clock)
    for key in ("gone", "newer", "kept"):
        cache.set(key, "old")
    loader = HeldLoader()
    with refreshing():  # the task copies the context: it refreshes
        refresh = asyncio.create_task(
            cache.load_many(["gone", "newer", "kept"], loader)
        )
        await loader.entered.wait()
    cache.invalidate("gone")
    cache.set("newer", "set meanwhile")
    loader.release.set()
    assert await refresh == 1
    assert cache.peek("gone", None) is None  # not brought back
    assert cache.peek("newer") == "set meanwhile"
    assert cache.peek("kept") == "v-kept"


async def test_a_key_that_expired_during_a_refresh_is_not_brought_back(
    fake_clock: FakeClock,
) -> None:
    cache = cache_of(fake_clock)
    cache.set("short", "old")
    fake_clock.advance(59)
    loader = HeldLoader()
    with refreshing():
        refresh = asyncio.create_task(cache.load_many(["short"], loader))
        await loader.entered.wait()
    fake_clock.advance(2)
    assert cache.peek("short", None) is None  # expired while the query ran
    loader.release.set()
    assert await refresh == 0
    assert len(cache) == 0


async def test_a_refresh_of_a_full_cache_evicts_nothing(fake_clock: FakeClock) -> None:
    cache: BoundedTTLCache[str, str] = BoundedTTLCache(
        "full", maxsize=2, ttl=60, clock=fake_clock
    )
    cache.set("a", "old")
    cache.set("b", "old")
    loader = HeldLoader()
    loader.release.set()
    with refreshing():
        assert await cache.load_many(["a", "b", "c"], loader) == 2
    assert sorted(cache.items()) == [("a", "v-a"), ("b", "v-b")]
    assert cache.evictions == 0
    # Outside refreshing(), the same call fills again (and never evicts).
    assert await cache.load_many(["c"], loader) == 0
    assert cache.stats()["loads"] == 0
