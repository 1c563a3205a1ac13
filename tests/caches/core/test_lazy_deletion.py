"""Lazy deletion and incremental compaction: order, eviction and scopes stay exact.

Stale slots (left by re-sets and removals) are told from live ones by a
per-queue count, and reclaimed by a compaction pass in bounded chunks. These
tests shrink the slack and the chunk so passes run all the time, and compare
the cache with an obviously-correct model after every operation.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from caches.core import BoundedTTLCache, FakeClock, Within
from caches.core import store as store_module
from tests.caches.core.test_bounded_ttl_cache import ReferenceCache, queued_slots


def by_server(key: tuple[int, int]) -> tuple[int, ...]:
    return (key[0],)


def by_channel_or_parent(key: tuple[int, int]) -> tuple[int, ...]:
    return (key[1], key[1] // 10)


def server_channels(key: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    # A thread-like key: its channel and its parent, both in its server.
    return ((key[0], key[1]), (key[0], key[1] // 10))


def server_users(key: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    return ((key[0], key[1] % 3),)


def first(value: tuple[int, int]) -> int:
    return value[0]


#: Two layouts: plain key scopes, and a server scope grouping two key scopes.
LAYOUTS: dict[str, dict[str, Any]] = {
    "keyed": {"server": by_server, "channel": by_channel_or_parent},
    "grouped": {
        "channel": server_channels,
        "user": server_users,
        "server": Within("channel", "user", parent=first),
    },
}
#: The scopes' meaning, written apart from the cache (the model's own).
MEANING = {
    "keyed": {"server": by_server, "channel": by_channel_or_parent},
    "grouped": {"server": by_server, "channel": server_channels, "user": server_users},
}


@pytest.fixture
def eager_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start a compaction pass at the first few stale slots, walk 3 slots a step."""
    monkeypatch.setattr(store_module, "_STALE_SLACK", 2)
    monkeypatch.setattr(store_module, "_COMPACT_CHUNK", 3)


def check_bookkeeping(cache: BoundedTTLCache[Any, Any]) -> None:
    """Assert the slot queues, stale counts, homes and indexes agree with the data."""
    data, home, q0 = cache._data, cache._home, cache._q0
    total_stale = 0
    live_slots: Counter[Any] = Counter()
    for queue in cache._queues.values():
        slots = queue.keys[queue.head :]
        times = list(queue.times[queue.head :])
        assert len(slots) == len(times)
        assert times == sorted(times), "a queue is sorted by store time"
        for key, count in Counter(slots).items():
            live_here = key in data and home.get(key, q0) is queue
            live_slots[key] += live_here
            assert queue.stale.get(key, 0) == count - live_here, key
        assert queue.stale_slots == sum(queue.stale.values())
        total_stale += queue.stale_slots
    assert cache._stale_slots == total_stale
    assert all(live_slots[key] == 1 for key in data), "every entry has one live slot"
    assert all(key in data and queue is not q0 for key, queue in home.items())
    for name in cache.scope_names:
        fn = cache.scope_values(name)
        expected: dict[Any, set[Any]] = {}
        for key in data:
            for value in fn(key):
                expected.setdefault(value, set()).add(key)
        assert cache.scope_members(name) == expected, name
    for _fn, index, groupings in cache._scopes:
        for parent, grouping in groupings:
            # A grouping holds exactly the values its scope's index holds.
            wanted: dict[Any, set[Any]] = {}
            for value in index:
                wanted.setdefault(parent(value), set()).add(value)
            assert {p: store_module._members(v) for p, v in grouping.items()} == wanted


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("seed", range(12))
def test_compaction_keeps_fifo_eviction_expiry_and_scopes_exact(
    seed: int, layout: str, eager_compaction: None
) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    cache: BoundedTTLCache[tuple[int, int], int] = BoundedTTLCache(
        "lazy",
        maxsize=12,
        ttl=10.0,
        clock=clock,
        scopes=LAYOUTS[layout],
    )
    meaning = MEANING[layout]
    model = ReferenceCache(12, 10.0, clock)
    for step in range(2500):
        clock.advance(0.001)
        key = (rng.randrange(4), rng.randrange(10, 40))
        action = rng.random()
        if action < 0.5:
            ttl = rng.choice([None, None, 3.0, 25.0])
            cache.set(key, step, ttl)
            model.set(key, step, ttl)
        elif action < 0.7:
            assert cache.get(key) == model.get(key), f"step {step} key {key}"
        elif action < 0.8:
            cache.invalidate(key)
            model.invalidate(key)
        elif action < 0.9:
            scope = rng.choice(sorted(meaning))
            fn = meaning[scope]
            value = rng.choice(fn(key))
            model._expire()
            dropped = [k for k in model.entries if value in fn(k)]
            assert cache.invalidate_scope(scope, value) == len(dropped), step
            for k in dropped:
                model.invalidate(k)
        elif action < 0.995:
            clock.advance(rng.choice([0, 0.5, 1, 4]))
        else:
            cache.clear()
            model.entries.clear()
        assert sorted(cache.keys()) == model.keys(), f"step {step}"
        check_bookkeeping(cache)


def test_a_hot_key_resets_in_bounded_work_and_slots(eager_compaction: None) -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache("c", maxsize=100, ttl=None)
    for i in range(50):
        cache.set(f"k{i}", i)
    for i in range(5000):
        cache.set("k7", i)
        # A pass starts past (live + slack) stale slots and walks a chunk per
        # write, so a queue stays within (2 x live + slack) x (1 + 1/chunk).
        assert queued_slots(cache) <= (2 * len(cache) + 2 + 1) * (1 + 1 / 3) + 1
    assert cache.get("k7") == 4999
    check_bookkeeping(cache)
    # FIFO order survives the compaction: k0 (never re-set) is evicted first,
    # the re-set key last.
    for i in range(99):
        cache.set(f"new{i}", i)
    assert "k0" not in cache and "k7" in cache
    check_bookkeeping(cache)


def test_a_scoped_drop_then_reset_keeps_the_new_entry(clock: FakeClock) -> None:
    cache: BoundedTTLCache[tuple[int, int], str] = BoundedTTLCache(
        "c", maxsize=3, ttl=60, clock=clock, scopes={"server": by_server}
    )
    cache.set((1, 10), "old")
    clock.advance(1)
    cache.set((2, 10), "other")
    assert cache.invalidate_scope("server", 1) == 1
    clock.advance(1)
    cache.set((1, 10), "new")  # its old slot is still queued, in front
    clock.advance(1)
    cache.set((3, 10), "third")
    cache.set((4, 10), "fourth")  # evicts (2, 10), the oldest live entry
    assert sorted(cache.keys()) == [(1, 10), (3, 10), (4, 10)]
    assert cache.get((1, 10)) == "new"
    check_bookkeeping(cache)


def test_a_key_in_two_values_of_one_scope_leaves_both(clock: FakeClock) -> None:
    cache: BoundedTTLCache[tuple[int, int], str] = BoundedTTLCache(
        "c", maxsize=10, ttl=60, clock=clock, scopes={"channel": by_channel_or_parent}
    )
    cache.set((0, 123), "thread")  # channel 123, parent 12
    cache.set((0, 12), "parent")  # channel 12, parent 1
    assert cache.invalidate_scope("channel", 12) == 2
    assert cache.keys_in_scope("channel", 123) == []
    assert cache.keys_in_scope("channel", 1) == []
    assert cache.invalidate_scope("channel", 123) == 0
    check_bookkeeping(cache)


def test_mixed_ttls_reset_and_expire_from_the_right_queue(clock: FakeClock) -> None:
    cache: BoundedTTLCache[str, int] = BoundedTTLCache(
        "c", maxsize=10, ttl=100, clock=clock
    )
    cache.set("k", 1, ttl=5)  # live in the 5 s queue
    cache.set("k", 2)  # now live in the 100 s queue; the 5 s slot is stale
    cache.set("k", 3, ttl=50)
    cache.invalidate("k")
    cache.set("k", 4, ttl=5)
    check_bookkeeping(cache)
    clock.advance(6)
    assert cache.get("k") is not None and "k" not in cache
    cache.set("k", 5)
    clock.advance(60)  # the stale 50 s slot passes; the 100 s entry stays
    assert cache.get("k") == 5
    check_bookkeeping(cache)
