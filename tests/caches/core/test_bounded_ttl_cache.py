"""BoundedTTLCache behaviour beyond the shared contract: its bookkeeping and edges."""

from __future__ import annotations

import asyncio
import math
import random
import subprocess
import sys
import time
from typing import Any

import pytest

from caches.core import MAX_TTL_QUEUES, MISSING, BoundedTTLCache, FakeClock


def queued_slots(cache: BoundedTTLCache[Any, Any]) -> int:
    """Return how many slots (live and stale) the order queues hold."""
    return sum(len(queue) for queue in cache._queues.values())


class ReferenceCache:
    """An obviously-correct, slow model of the cache's documented semantics."""

    def __init__(self, maxsize: int, ttl: float, clock: FakeClock) -> None:
        self.maxsize, self.ttl, self.clock = maxsize, ttl, clock
        self.entries: dict[Any, tuple[Any, float, int]] = {}  # value, deadline, seq
        self.seq = 0

    def _expire(self) -> None:
        now = self.clock()
        self.entries = {k: e for k, e in self.entries.items() if e[1] > now}

    def set(self, key: Any, value: Any, ttl: float | None) -> None:
        self._expire()
        if key not in self.entries and len(self.entries) >= self.maxsize:
            oldest = min(self.entries, key=lambda k: self.entries[k][2])
            del self.entries[oldest]
        self.seq += 1
        self.entries[key] = (value, self.clock() + (ttl or self.ttl), self.seq)

    def get(self, key: Any) -> Any:
        self._expire()
        return self.entries[key][0] if key in self.entries else MISSING

    def invalidate(self, key: Any) -> None:
        self.entries.pop(key, None)

    def keys(self) -> list[Any]:
        self._expire()
        return sorted(self.entries)


@pytest.mark.parametrize("default_ttl", [10.0, None])
@pytest.mark.parametrize("seed", range(8))
def test_random_operations_match_reference_model(
    seed: int, default_ttl: float | None
) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    cache: BoundedTTLCache[int, int] = BoundedTTLCache(
        "model", maxsize=8, ttl=default_ttl, clock=clock
    )
    model = ReferenceCache(8, default_ttl or math.inf, clock)
    for step in range(3000):
        # Entries stored at the same instant with different ttls have no
        # defined eviction order (documented), so time always moves a little.
        clock.advance(0.001)
        key = rng.randrange(20)
        action = rng.random()
        if action < 0.45:
            ttl = rng.choice([None, None, 3.0, 25.0])
            cache.set(key, step, ttl)
            model.set(key, step, ttl)
        elif action < 0.8:
            assert cache.get(key) == model.get(key), f"step {step} key {key}"
        elif action < 0.9:
            cache.invalidate(key)
            model.invalidate(key)
        elif action < 0.995:
            clock.advance(rng.choice([0, 0.5, 1, 4]))
        else:
            cache.clear()
            model.entries.clear()
        assert sorted(cache.keys()) == model.keys(), f"step {step}"


def test_repeated_resets_keep_queues_bounded() -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache("c", maxsize=100, ttl=None)
    for i in range(20_000):
        cache.set("hot", i)
    assert cache.get("hot") == 19_999
    assert queued_slots(cache) <= len(cache) + 1025


def test_invalidation_churn_keeps_queues_bounded() -> None:
    cache: BoundedTTLCache[int, int] = BoundedTTLCache("c", maxsize=100, ttl=None)
    for i in range(20_000):
        cache.set(i, i)
        cache.invalidate(i)
    cache.set(-1, -1)
    assert len(cache) == 1
    assert queued_slots(cache) <= len(cache) + 1025
    cache.set(-2, -2)
    assert sorted(cache.keys()) == [-2, -1]


def test_eviction_takes_oldest_across_ttls() -> None:
    clock = FakeClock()
    cache: BoundedTTLCache[str, int] = BoundedTTLCache(
        "c", maxsize=3, ttl=50, clock=clock
    )
    cache.set("a", 1, ttl=100)
    clock.advance(1)
    cache.set("b", 2, ttl=5)
    clock.advance(1)
    cache.set("c", 3)
    cache.set("d", 4)
    assert sorted(cache.keys()) == ["b", "c", "d"]


def test_reset_with_shorter_ttl_moves_deadline_earlier() -> None:
    clock = FakeClock()
    cache: BoundedTTLCache[str, int] = BoundedTTLCache(
        "c", maxsize=10, ttl=100, clock=clock
    )
    cache.set("k", 1)
    cache.set("k", 2, ttl=2)
    clock.advance(3)
    assert cache.get("k") is MISSING
    cache.set("k", 3)
    clock.advance(98)  # the stale 100 s slot passes; the new entry must stay
    assert cache.get("k") == 3


def test_ttls_beyond_the_queue_cap_never_expire_late() -> None:
    clock = FakeClock()
    cache: BoundedTTLCache[int, int] = BoundedTTLCache(
        "c", maxsize=1000, ttl=1000, clock=clock
    )
    for i in range(MAX_TTL_QUEUES + 20):
        cache.set(i, i, ttl=10 + i)
    assert len(cache._queues) <= MAX_TTL_QUEUES
    for i in range(MAX_TTL_QUEUES + 20):
        clock.advance(1)
        deadline_passed = [k for k in range(i + 1) if 10 + k < clock()]
        assert all(cache.get(k) is MISSING for k in deadline_passed)
    clock.advance(10)
    assert cache.get(MAX_TTL_QUEUES // 2) is MISSING


def test_set_clock_keeps_remaining_lifetime() -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache("c", maxsize=10, ttl=60)
    cache.set("k", 1)
    fake = FakeClock(start=5.0)
    cache.clock = fake
    assert cache.clock is fake
    fake.advance(58)
    assert cache.get("k") == 1
    fake.advance(3)
    assert cache.get("k") is MISSING


def test_set_clock_after_stale_slots_keeps_bookkeeping() -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache("c", maxsize=2, ttl=60)
    cache.set("a", 1)
    cache.set("a", 2)
    cache.set_clock(FakeClock(start=time.monotonic() + 1000))
    cache.set("b", 3)
    cache.set("c", 4)
    assert sorted(cache.keys()) == ["b", "c"]


@pytest.mark.parametrize(
    "kwargs", [{"maxsize": 0}, {"maxsize": 5, "ttl": 0}, {"maxsize": 5, "ttl": -1}]
)
def test_invalid_construction_is_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        BoundedTTLCache("bad", **kwargs)


@pytest.mark.parametrize("ttl", [0, -5, math.nan])
def test_non_positive_entry_ttl_is_rejected(ttl: float) -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache("c", maxsize=5, ttl=10)
    with pytest.raises(ValueError):
        cache.set("k", 1, ttl=ttl)


def test_infinite_entry_ttl_outlives_cache_ttl(clock: FakeClock) -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache(
        "c", maxsize=5, ttl=10, clock=clock
    )
    cache.set("pinned", 1, ttl=math.inf)
    clock.advance(10**6)
    assert cache.get("pinned") == 1


async def test_get_or_load_stores_with_entry_ttl(clock: FakeClock) -> None:
    cache: BoundedTTLCache[str, str] = BoundedTTLCache(
        "c", maxsize=5, ttl=100, clock=clock
    )

    async def load() -> str:
        return "negative"

    assert await cache.get_or_load("k", load, ttl=5) == "negative"
    clock.advance(6)
    assert cache.get("k") is MISSING


def test_load_left_on_a_closed_loop_does_not_block_the_next_loop() -> None:
    cache: BoundedTTLCache[str, str] = BoundedTTLCache("c", maxsize=5, ttl=10)

    async def never() -> str:
        await asyncio.Event().wait()
        return "never"

    async def start_and_leave() -> None:
        asyncio.ensure_future(cache.get_or_load("k", never))
        await asyncio.sleep(0)

    old_loop = asyncio.new_event_loop()
    old_loop.run_until_complete(start_and_leave())
    old_loop.close()  # like a test loop torn down with the load still pending

    async def fresh() -> str:
        return "fresh"

    assert asyncio.run(cache.get_or_load("k", fresh)) == "fresh"
    assert cache.get("k") == "fresh"


def test_stats_report_resident_size_without_expiring(clock: FakeClock) -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache(
        "c", maxsize=5, ttl=10, clock=clock
    )
    cache.set("k", 1)
    clock.advance(11)
    assert cache.stats()["size"] == 1  # resident until a read or write drops it
    assert len(cache) == 0
    assert cache.stats()["size"] == 0


def test_core_imports_no_django() -> None:
    code = (
        "import sys, caches.core, caches.registry;"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'django'];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
