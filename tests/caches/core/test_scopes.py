"""Scope indexes: a scoped invalidation drops exactly what a scan would, without the scan."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caches.core import BoundedTTLCache, FakeClock, Within


def by_server(key: tuple[int, int]) -> tuple[int, ...]:
    return (key[0],)


def by_channel_or_parent(key: tuple[int, int]) -> tuple[int, ...]:
    return (key[1], key[1] // 10)  # a channel and its "parent"


def cache(clock: FakeClock, maxsize: int = 1000) -> BoundedTTLCache:
    return BoundedTTLCache(
        "scoped",
        maxsize=maxsize,
        ttl=60,
        clock=clock,
        scopes={"server": by_server, "channel": by_channel_or_parent},
    )


def test_a_scoped_invalidation_drops_only_that_scope(fake_clock):
    c = cache(fake_clock)
    for server in range(3):
        for channel in range(10, 15):
            c.set((server, channel), "v")
    assert c.invalidate_scope("server", 1) == 5
    assert sorted(c.keys()) == [(s, ch) for s in (0, 2) for ch in range(10, 15)]
    assert c.keys_in_scope("server", 1) == []
    assert c.invalidations == 5


def test_a_key_in_two_values_of_a_scope_goes_with_either(fake_clock):
    c = cache(fake_clock)
    c.set((0, 123), "thread")  # channel 123, parent 12
    c.set((0, 12), "parent")  # channel 12, parent 1
    assert c.invalidate_scope("channel", 12) == 2
    assert len(c) == 0


def test_evicted_and_expired_keys_leave_the_index(fake_clock):
    c = cache(fake_clock, maxsize=2)
    c.set((1, 10), "a")
    c.set((1, 11), "b")
    c.set((2, 10), "c")  # evicts (1, 10)
    assert sorted(c.keys_in_scope("server", 1)) == [(1, 11)]
    fake_clock.advance(61)
    assert c.keys_in_scope("server", 1) == [] and c.keys_in_scope("server", 2) == []
    c.set((3, 10), "d")
    c.clear()
    assert c.keys_in_scope("server", 3) == []
    assert c._scopes[0][1] == {} and c._scopes[1][1] == {}


def test_an_unknown_scope_is_an_error(fake_clock):
    with pytest.raises(KeyError, match="has no scope 'user'"):
        cache(fake_clock).invalidate_scope("user", 1)


@pytest.mark.parametrize(
    ("grouped", "key"), [(False, (5, 50)), (True, (5, 50, 0))], ids=["keyed", "grouped"]
)
async def test_a_scoped_invalidation_stales_a_load_in_flight(fake_clock, grouped, key):
    import asyncio

    c = grouped_cache(fake_clock) if grouped else cache(fake_clock)
    started, release = asyncio.Event(), asyncio.Event()

    async def load() -> str:
        started.set()
        await release.wait()
        return "old"

    task = asyncio.ensure_future(c.get_or_load(key, load))
    await started.wait()
    c.invalidate_scope("server", 5)
    release.set()
    assert await task == "old"
    assert key not in c  # a load that overlapped the invalidation is not stored


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "invalidate", "scope", "values", "tick"]),
            st.integers(0, 4),
            st.integers(10, 40),
        ),
        max_size=120,
    )
)
def test_the_index_always_agrees_with_a_scan(ops):
    clock = FakeClock()
    c = cache(clock, maxsize=25)
    for op, server, channel in ops:
        if op == "set":
            c.set((server, channel), "v", ttl=random.choice([None, 5.0]))
        elif op == "invalidate":
            c.invalidate((server, channel))
        elif op == "tick":
            clock.advance(3)
        elif op == "values":  # several channel values at once (keys in two)
            values = {channel, channel // 10, 10 + server}
            live = c.keys()
            expected = {k for k in live if values & set(by_channel_or_parent(k))}
            assert c.invalidate_scope_values("channel", values) == len(expected)
        else:
            live = c.keys()
            expected = {k for k in live if k[0] == server}
            assert c.invalidate_scope("server", server) == len(expected)
        live = c.keys()
        for value in range(5):
            scanned = {k for k in live if k[0] == value}
            assert set(c.keys_in_scope("server", value)) == scanned
        for value in range(1, 41):
            scanned = {k for k in live if value in by_channel_or_parent(k)}
            assert set(c.keys_in_scope("channel", value)) == scanned


def test_a_scope_value_with_one_key_holds_it_without_a_set(fake_clock):
    c = cache(fake_clock)
    c.set((1, 10), "a")
    index = c._scopes[0][1]
    assert index[1] == (1, 10) and not isinstance(index[1], set)
    c.set((1, 10), "again")  # a re-set keeps the lone key
    assert index[1] == (1, 10)
    c.set((1, 11), "b")
    assert index[1] == {(1, 10), (1, 11)}
    c.invalidate((1, 10))  # back to one key: back to the key itself
    assert index[1] == (1, 11)
    assert c.keys_in_scope("server", 1) == [(1, 11)]
    assert c.scope_members("server") == {1: {(1, 11)}}
    assert c.invalidate_scope("server", 1) == 1
    assert 1 not in index and c.keys_in_scope("server", 1) == []
    c.set((2, 20), "c")
    assert c.invalidate_scope("channel", 20) == 1  # a lone key, its other scopes too
    assert c._scopes[0][1] == {} and c._scopes[1][1] == {}


def grouped_cache(clock: FakeClock) -> BoundedTTLCache:
    # Keys (server, channel, parent): channels and users, grouped by server.
    return BoundedTTLCache(
        "grouped",
        maxsize=1000,
        ttl=60,
        clock=clock,
        scopes={
            "channel": lambda k: (
                ((k[0], k[1]),) if k[2] == 0 else ((k[0], k[1]), (k[0], k[2]))
            ),
            "server": Within("channel", parent=lambda v: v[0]),
        },
    )


def test_a_grouping_scope_drops_its_groups_keys_and_their_index_entries(fake_clock):
    c = grouped_cache(fake_clock)
    for server in (1, 2):
        for channel in (10, 11):
            c.set((server, channel, 0), "v")
    c.set((1, 99, 10), "thread of 10")
    assert sorted(c.keys_in_scope("server", 1)) == [(1, 10, 0), (1, 11, 0), (1, 99, 10)]
    assert c.scope_members("server") == {
        1: {(1, 10, 0), (1, 11, 0), (1, 99, 10)},
        2: {(2, 10, 0), (2, 11, 0)},
    }
    assert c.invalidate_scope("server", 1) == 3
    assert sorted(c.keys()) == [(2, 10, 0), (2, 11, 0)]
    assert c.keys_in_scope("channel", (1, 10)) == []
    assert set(c.scope_members("channel")) == {(2, 10), (2, 11)}
    # A channel drop empties its group: the server leaves the grouping.
    assert c.invalidate_scope("channel", (2, 10)) == 1
    assert c.invalidate_scope("channel", (2, 11)) == 1
    assert c.scope_members("server") == {} and c._scopes[0][2][0][1] == {}


@pytest.mark.parametrize(
    "scopes",
    [
        # Two values of one scope, in two servers.
        {
            "channel": lambda k: ((k[0], k[1]), (k[2], k[1])),
            "server": Within("channel", parent=lambda v: v[0]),
        },
        # One value in each of two grouped scopes, in two servers.
        {
            "user": lambda k: ((k[0], k[1]),),
            "channel": lambda k: ((k[2], k[1]),),
            "server": Within("user", "channel", parent=lambda v: v[0]),
        },
    ],
    ids=["one-scope", "two-scopes"],
)
def test_a_key_whose_values_have_two_parents_is_refused(scopes):
    c = BoundedTTLCache("bad", maxsize=1, scopes=scopes)
    c.set((1, 10, 1), "v")  # every value in server 1: fine
    with pytest.raises(ValueError, match="must share one parent"):
        c.set((1, 10, 2), "v")
    # Refused whole, before anything changed: the first key is neither evicted
    # (the cache is full) nor unindexed.
    assert c.keys() == [(1, 10, 1)] and c.evictions == 0
    for name in c.scope_names:
        assert all(keys == {(1, 10, 1)} for keys in c.scope_members(name).values())
    assert c.invalidate_scope("server", 1) == 1 and len(c) == 0


def test_a_grouping_must_name_scopes_of_keys():
    with pytest.raises(ValueError, match="groups 'user', which is not a scope of keys"):
        BoundedTTLCache(
            "bad", maxsize=10, scopes={"server": Within("user", parent=str)}
        )
    with pytest.raises(ValueError, match="names a scope twice"):
        BoundedTTLCache(
            "bad",
            maxsize=10,
            scopes={"c": lambda k: (k,), "server": Within("c", "c", parent=str)},
        )


def test_rekey_moves_a_live_value_and_its_index_entries(fake_clock):
    from tests.caches.core.test_lazy_deletion import check_bookkeeping

    c = BoundedTTLCache(
        "grouped",
        maxsize=10,
        ttl=60,
        clock=fake_clock,
        scopes={
            "channel": lambda key: ((key[0], key[1]),),
            "server": Within("channel", parent=lambda channel: channel[0]),
        },
    )
    c.set((1, 10, "roles"), "answer")
    fake_clock.advance(30)
    assert c.rekey((1, 10, "roles"), (1, 10, "*"))
    assert c.keys() == [(1, 10, "*")] and c.peek((1, 10, "*")) == "answer"
    check_bookkeeping(c)
    fake_clock.advance(45)  # the moved value has a fresh deadline
    assert c.peek((1, 10, "*")) == "answer"
    assert c.invalidate_scope("server", 1) == 1
    # Nothing to move: absent, dropped or expired keys bring nothing back.
    assert not c.rekey((1, 10, "roles"), (1, 10, "*"))
    c.set((2, 20, "roles"), "old")
    fake_clock.advance(61)
    assert not c.rekey((2, 20, "roles"), (2, 20, "*"))
    assert len(c) == 0
    check_bookkeeping(c)
