"""Each cache's sampled bytes, estimated by the worker itself on its loop (no METRICS_PORT)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from caches.core import BoundedTTLCache, FakeClock
from caches.registry import EmergencyPolicy, registry
from metrics.cache_bytes import CacheBytesEstimator, deep_size

CACHE = "bytes_test"
INTERVAL = 15.0
VALUE_CHARS = 1000


@pytest.fixture
def bytes_cache() -> Iterator[BoundedTTLCache[int, str]]:
    """Register a cache of 40 values of 1,000 characters each."""
    cache: BoundedTTLCache[int, str] = BoundedTTLCache(CACHE, maxsize=500, ttl=600)
    registry.register(CACHE, cache, policy=EmergencyPolicy.CLEAR)
    fill(cache, range(40))
    yield cache
    registry.unregister(CACHE)


def fill(cache: BoundedTTLCache[int, str], keys: range) -> None:
    """Store a distinct 1,000-character value under each key."""
    for key in keys:
        cache.set(key, f"{key:04d}" * (VALUE_CHARS // 4))


def _ticker(clock: FakeClock, stop: asyncio.Event, *, between: list[Any]) -> Any:
    """Return a wait that advances the clock, runs the next step, and stops after the last."""
    waits: list[float] = []

    async def wait(_stop: asyncio.Event, seconds: float) -> None:
        waits.append(seconds)
        if not between:
            stop.set()
            return
        clock.advance(seconds)
        between.pop(0)()

    wait.waits = waits  # type: ignore[attr-defined]
    return wait


async def test_the_estimates_are_refreshed_every_interval_and_follow_the_entries(
    bytes_cache: BoundedTTLCache[int, str],
) -> None:
    clock, stop = FakeClock(), asyncio.Event()
    estimator = CacheBytesEstimator(registry, sample=8, clock=clock)
    seen: list[int] = []
    wait = _ticker(
        clock,
        stop,
        between=[
            lambda: seen.append(estimator.estimates[CACHE]),
            lambda: (
                seen.append(estimator.estimates[CACHE]),
                fill(bytes_cache, range(40, 120)),
            ),
        ],
    )
    assert estimator.estimates == {}  # nothing before the first refresh
    await estimator.run(stop, interval_seconds=INTERVAL, wait=wait)
    assert wait.waits == [INTERVAL] * 3
    assert seen[0] == seen[1]  # same entries, same estimate
    assert 40 * VALUE_CHARS < seen[0] < 40 * VALUE_CHARS * 1.2
    assert 120 * VALUE_CHARS < estimator.estimates[CACHE] < 120 * VALUE_CHARS * 1.2
    assert estimator.refreshed_at == clock() == 2 * INTERVAL


async def test_a_sample_of_zero_turns_the_estimates_off(
    bytes_cache: BoundedTTLCache[int, str],
) -> None:
    estimator = CacheBytesEstimator(registry, sample=0)
    assert await estimator.refresh() == {}
    assert estimator.refreshed_at is None


def test_the_walk_counts_a_childs_holders_besides_itself() -> None:
    # The walk's own references to a child are what _WALK_REFERENCES subtracts:
    # a string only a tuple holds is charged whole to it; one that four more
    # holders share (this test's variable and three other tuples), a fifth.
    tuple_bytes = sys.getsizeof(("",))
    alone = deep_size(("".join(["x"] * 10_000),))
    assert alone == tuple_bytes + sys.getsizeof("x" * 10_000)
    text = "".join(["x"] * 10_000)
    others = [(text,) for _ in range(3)]
    assert deep_size((text,)) == round(tuple_bytes + sys.getsizeof(text) / 5)
    assert len(others) == 3


async def test_values_sharing_objects_count_them_once_across_the_cache() -> None:
    # 200 entries, each a tuple of the same ten 1,000-character messages (as
    # short-term memory entries share their messages): the messages are held
    # once, whatever the sample.
    messages = [f"{n:04d}" * (VALUE_CHARS // 4) for n in range(10)]
    cache: BoundedTTLCache[int, tuple[str, ...]] = BoundedTTLCache(
        "shared_bytes", maxsize=500, ttl=600
    )
    for key in range(200):
        cache.set(key, tuple(messages))
    registry.register("shared_bytes", cache, policy=EmergencyPolicy.CLEAR)
    try:
        estimate = (await CacheBytesEstimator(registry, sample=8).refresh())[
            "shared_bytes"
        ]
    finally:
        registry.unregister("shared_bytes")
    tuples = 200 * (sys.getsizeof(tuple(messages)) + sys.getsizeof(0))
    held = 10 * sys.getsizeof(messages[0])
    assert tuples + held * 0.9 < estimate < tuples + held * 1.2
