"""The cache contract: checks any BoundedTTLCache-like cache must pass.

Each check takes a `make_cache(*, maxsize, ttl, clock)` factory and builds the
caches it needs with arbitrary keys; tests/caches/core/test_contract.py runs them
over every cache implementation (`CACHE_FACTORIES`):

    @pytest.mark.parametrize("check", SYNC_CONTRACT, ids=check_id)
    def test_my_cache_meets_contract(check):
        check(make_my_cache)

Async checks are in ASYNC_CONTRACT and must be awaited. `check_managed_cache`
covers the smaller `ManagedCache` protocol for anything the registry holds;
tests/caches/layers/test_contract.py runs it, and the layer-level checks (expiry,
cap, clear, invalidation of every member map, filled through each layer's
public API), over every registered layer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import pytest

from caches.core import MISSING, DoNotCache, FakeClock
from caches.registry import ManagedCache


class MakeCache(Protocol):
    """Build a fresh, empty cache under test."""

    def __call__(self, *, maxsize: int, ttl: float | None, clock: FakeClock) -> Any: ...


SyncCheck = Callable[[MakeCache], None]
AsyncCheck = Callable[[MakeCache], Awaitable[None]]


def check_id(check: Callable[..., Any]) -> str:
    """Return a readable pytest id for a contract check."""
    return check.__name__.removeprefix("check_")


# ------------------------------------------------------------------ sync


def check_expiry_boundary(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=10, ttl=10, clock=clock)
    cache.set("k", "v")
    clock.advance(9)
    assert cache.get("k") == "v"
    assert "k" in cache
    clock.advance(2)
    assert cache.get("k") is MISSING
    assert "k" not in cache
    assert cache.stats()["expirations"] == 1


def check_get_default_on_miss(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    assert cache.get("absent") is MISSING
    assert cache.get("absent", "fallback") == "fallback"


def check_negative_entry_is_a_hit(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    cache.set("none", None)
    assert cache.get("none", "default") is None
    assert cache.get("other") is MISSING
    stats = cache.stats()
    assert (stats["hits"], stats["misses"]) == (1, 1)


def check_per_entry_ttl(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=10, ttl=10, clock=clock)
    cache.set("short", 1, ttl=2)
    cache.set("long", 2, ttl=20)
    cache.set("default", 3)
    clock.advance(3)
    assert cache.get("short") is MISSING
    assert cache.get("default") == 3
    clock.advance(8)
    assert cache.get("default") is MISSING
    assert cache.get("long") == 2
    clock.advance(10)
    assert cache.get("long") is MISSING


def check_no_ttl_never_expires(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=10, ttl=None, clock=clock)
    cache.set("static", 1)
    clock.advance(10**9)
    assert cache.get("static") == 1
    assert cache.stats()["ttl"] is None


def check_reset_refreshes_deadline(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=10, ttl=10, clock=clock)
    cache.set("k", 1)
    clock.advance(8)
    cache.set("k", 2)
    clock.advance(8)
    assert cache.get("k") == 2
    clock.advance(3)
    assert cache.get("k") is MISSING


def check_evicts_expired_before_oldest(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=3, ttl=10, clock=clock)
    cache.set("a", 1)
    clock.advance(5)
    cache.set("b", 2)
    cache.set("c", 3, ttl=1)
    clock.advance(2)
    cache.set("d", 4)  # c has expired: it goes, not the oldest (a)
    assert sorted(cache.keys()) == ["a", "b", "d"]
    assert cache.stats()["evictions"] == 0
    cache.set("e", 5)  # nothing expired: the oldest goes
    assert sorted(cache.keys()) == ["b", "d", "e"]
    assert cache.stats()["evictions"] == 1


def check_reset_moves_key_to_newest(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=3, ttl=None, clock=FakeClock())
    for key in "abc":
        cache.set(key, key)
    cache.set("a", "A")  # re-set: no eviction, a becomes the newest
    assert len(cache) == 3
    cache.set("d", "d")
    assert sorted(cache.keys()) == ["a", "c", "d"]
    assert cache.get("a") == "A"


def check_cap_never_exceeded(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=1000, ttl=60, clock=FakeClock())
    for i in range(100_000):
        cache.set(i, i)
        if i % 997 == 0:
            assert cache.stats()["size"] <= 1000
    assert len(cache) == 1000
    assert sorted(cache.keys()) == list(range(99_000, 100_000))
    assert cache.stats()["evictions"] == 99_000


def check_write_sweeps_never_read_keys(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=10_000, ttl=10, clock=clock)
    for i in range(500):
        cache.set(f"once:{i}", i)
    clock.advance(10 + 600 + 1)  # ttl + the default sweep interval
    cache.set("fresh", 1)  # a write, and no read of the old keys
    stats = cache.stats()
    assert stats["size"] == 1
    assert stats["expirations"] == 500


def check_clear_expired(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=10, ttl=10, clock=clock)
    cache.set("old", 1)
    clock.advance(5)
    cache.set("new", 2)
    clock.advance(6)
    assert cache.clear_expired() == 1
    assert cache.clear_expired() == 0
    assert cache.keys() == ["new"]
    assert cache.stats()["expirations"] == 1


def check_invalidation_counts(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    for key in ("user:1", "user:2", "server:1", "server:2"):
        cache.set(key, key)
    assert cache.stats()["last_invalidation"] is None
    assert cache.invalidate("user:1") == 1
    assert cache.invalidate("user:1") == 0
    assert cache.invalidate_prefix("server:") == 2
    assert cache.invalidate_where(lambda key: key.endswith("2")) == 1
    assert len(cache) == 0
    stats = cache.stats()
    assert stats["invalidations"] == 4
    assert stats["last_invalidation"] is not None


def check_clear_returns_count(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    for i in range(7):
        cache.set(i, i)
    assert cache.clear() == 7
    assert cache.clear() == 0
    assert len(cache) == 0
    assert cache.stats()["invalidations"] == 7


def check_invalidated_key_can_be_set_again(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=2, ttl=10, clock=clock)
    cache.set("a", 1)
    cache.invalidate("a")
    clock.advance(1)
    cache.set("a", 2)
    cache.set("b", 3)
    cache.set("c", 4)  # evicts a (oldest live), not b
    assert sorted(cache.keys()) == ["b", "c"]
    clock.advance(9.5)
    assert cache.get("b") == 3


def check_peek_items_keys_count_no_stats(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    cache.set("a", 1)
    cache.set("b", None)
    assert cache.peek("a") == 1
    assert cache.peek("b", "x") is None
    assert cache.peek("zz") is MISSING
    assert sorted(cache.items()) == [("a", 1), ("b", None)]
    assert sorted(cache.keys()) == ["a", "b"]
    assert "a" in cache
    stats = cache.stats()
    assert (stats["hits"], stats["misses"]) == (0, 0)


def check_stats_add_up(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=5, ttl=10, clock=clock)
    gets = 0
    for i in range(20):
        cache.set(i % 8, i)
        for probe in (i % 8, i + 100, (i * 3) % 8):
            cache.get(probe)
            gets += 1
        clock.advance(1)
    stats = cache.stats()
    assert stats["hits"] + stats["misses"] == gets
    assert stats["size"] == len(cache) <= stats["cap"] == 5
    assert stats["ttl"] == 10
    assert stats["name"]
    cache.reset_stats()
    assert cache.stats()["hits"] == cache.stats()["misses"] == 0


SYNC_CONTRACT: list[SyncCheck] = [
    check_expiry_boundary,
    check_get_default_on_miss,
    check_negative_entry_is_a_hit,
    check_per_entry_ttl,
    check_no_ttl_never_expires,
    check_reset_refreshes_deadline,
    check_evicts_expired_before_oldest,
    check_reset_moves_key_to_newest,
    check_cap_never_exceeded,
    check_write_sweeps_never_read_keys,
    check_clear_expired,
    check_invalidation_counts,
    check_clear_returns_count,
    check_invalidated_key_can_be_set_again,
    check_peek_items_keys_count_no_stats,
    check_stats_add_up,
]


# ------------------------------------------------------------------ async


class GatedLoader:
    """A loader that counts its calls and waits for `release()` to answer."""

    def __init__(self, result: Any = "loaded", error: BaseException | None = None):
        self.calls = 0
        self.result = result
        self.error = error
        self.started = asyncio.Event()
        self._gate = asyncio.Event()

    def release(self) -> None:
        """Let every pending and future call finish."""
        self._gate.set()

    async def __call__(self) -> Any:
        self.calls += 1
        self.started.set()
        await self._gate.wait()
        if self.error is not None:
            raise self.error
        return self.result


async def check_hit_returns_without_loading(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    cache.set("k", None)
    loader = GatedLoader()
    assert await cache.get_or_load("k", loader) is None
    assert loader.calls == 0
    assert cache.stats()["hits"] == 1


async def check_single_flight(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    loader = GatedLoader(result={"row": 1})
    waiters = [
        asyncio.ensure_future(cache.get_or_load("k", loader)) for _ in range(1000)
    ]
    await loader.started.wait()
    loader.release()
    results = await asyncio.gather(*waiters)
    assert loader.calls == 1
    assert all(result is loader.result for result in results)
    assert cache.get("k") is loader.result
    stats = cache.stats()
    assert (stats["loads"], stats["misses"], stats["hits"]) == (1, 1000, 1)


async def check_loader_error_reaches_every_waiter(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    loader = GatedLoader(error=RuntimeError("db down"))
    waiters = [asyncio.ensure_future(cache.get_or_load("k", loader)) for _ in range(50)]
    await loader.started.wait()
    loader.release()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert cache.get("k") is MISSING
    assert cache.stats()["load_failures"] == 1
    retry = GatedLoader(result="ok")
    retry.release()
    assert await cache.get_or_load("k", retry) == "ok"
    assert retry.calls == 1


async def check_do_not_cache(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    loader = GatedLoader(result=DoNotCache("fallback"))
    waiters = [asyncio.ensure_future(cache.get_or_load("k", loader)) for _ in range(3)]
    await loader.started.wait()
    loader.release()
    assert await asyncio.gather(*waiters) == ["fallback"] * 3
    assert cache.get("k") is MISSING
    assert loader.calls == 1
    assert await cache.get_or_load("k", loader) == "fallback"
    assert loader.calls == 2


async def _load_across(
    make_cache: MakeCache, invalidate: Callable[[Any], object], key: str = "user:1"
) -> None:
    """Check a load overlapping `invalidate(cache)` answers but stores nothing."""
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    old = GatedLoader(result="old")
    waiter = asyncio.ensure_future(cache.get_or_load(key, old))
    await old.started.wait()
    invalidate(cache)
    # A caller after the invalidation must not join the stale load.
    fresh = GatedLoader(result="fresh")
    late = asyncio.ensure_future(cache.get_or_load(key, fresh))
    await fresh.started.wait()
    old.release()
    assert await waiter == "old"
    assert cache.get(key) is MISSING  # the older read did not overwrite
    fresh.release()
    assert await late == "fresh"
    assert cache.get(key) == "fresh"
    assert cache.stats()["last_invalidation"] is not None


async def check_invalidate_during_load(make_cache: MakeCache) -> None:
    await _load_across(make_cache, lambda cache: cache.invalidate("user:1"))


async def check_clear_during_load(make_cache: MakeCache) -> None:
    await _load_across(make_cache, lambda cache: cache.clear())


async def check_invalidate_where_during_load(make_cache: MakeCache) -> None:
    await _load_across(
        make_cache, lambda cache: cache.invalidate_where(lambda k: k.endswith(":1"))
    )


async def check_invalidate_prefix_during_load(make_cache: MakeCache) -> None:
    await _load_across(make_cache, lambda cache: cache.invalidate_prefix("user:"))


async def check_set_during_load_wins(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    old = GatedLoader(result="old")
    waiter = asyncio.ensure_future(cache.get_or_load("k", old))
    await old.started.wait()
    cache.set("k", "new")  # newer than the load that started before it
    unused = GatedLoader(result="unused")
    assert await cache.get_or_load("k", unused) == "new"
    old.release()
    assert await waiter == "old"  # its waiters still get the loaded value
    assert cache.get("k") == "new"  # but the older load did not overwrite
    assert unused.calls == 0


async def check_set_of_other_key_keeps_load(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    loader = GatedLoader(result="loaded")
    waiter = asyncio.ensure_future(cache.get_or_load("k", loader))
    await loader.started.wait()
    cache.set("other", 1)
    loader.release()
    assert await waiter == "loaded"
    assert cache.get("k") == "loaded"
    assert cache.get("other") == 1


async def check_unrelated_invalidation_keeps_load(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    loader = GatedLoader(result="v")
    waiter = asyncio.ensure_future(cache.get_or_load("user:1", loader))
    await loader.started.wait()
    cache.invalidate("user:2")
    cache.invalidate_prefix("server:")
    loader.release()
    assert await waiter == "v"
    assert cache.get("user:1") == "v"


async def check_cancelled_waiter_does_not_break_others(make_cache: MakeCache) -> None:
    cache = make_cache(maxsize=10, ttl=10, clock=FakeClock())
    loader = GatedLoader(result="v")
    first, doomed, last = (
        asyncio.ensure_future(cache.get_or_load("k", loader)) for _ in range(3)
    )
    await loader.started.wait()
    first.cancel()
    doomed.cancel()
    loader.release()
    assert await last == "v"
    for task in (first, doomed):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert loader.calls == 1
    assert cache.get("k") == "v"


async def check_loaded_entry_expires(make_cache: MakeCache) -> None:
    clock = FakeClock()
    cache = make_cache(maxsize=10, ttl=10, clock=clock)
    loader = GatedLoader(result="v")
    loader.release()
    assert await cache.get_or_load("k", loader) == "v"
    clock.advance(11)
    assert cache.get("k") is MISSING
    assert await cache.get_or_load("k", loader) == "v"
    assert loader.calls == 2


ASYNC_CONTRACT: list[AsyncCheck] = [
    check_hit_returns_without_loading,
    check_single_flight,
    check_loader_error_reaches_every_waiter,
    check_do_not_cache,
    check_invalidate_during_load,
    check_clear_during_load,
    check_invalidate_where_during_load,
    check_invalidate_prefix_during_load,
    check_set_during_load_wins,
    check_set_of_other_key_keeps_load,
    check_unrelated_invalidation_keeps_load,
    check_cancelled_waiter_does_not_break_others,
    check_loaded_entry_expires,
]


# ------------------------------------------------------------------ protocol

STATS_KEYS = {
    "name",
    "hits",
    "misses",
    "loads",
    "load_failures",
    "evictions",
    "expirations",
    "invalidations",
    "size",
    "cap",
    "ttl",
    "last_invalidation",
}


def check_managed_cache(cache: ManagedCache) -> None:
    """Check the registry-facing protocol on a registered (live) cache.

    Destructive: it clears the cache.
    """
    assert isinstance(cache, ManagedCache)
    assert set(cache.stats()) >= STATS_KEYS
    assert isinstance(cache.clear_expired(), int)
    assert isinstance(cache.invalidate(object()), int)
    before = len(cache)
    assert cache.clear() == before
    assert len(cache) == 0
    assert callable(cache.set_clock)  # not called: it would re-clock a live cache
