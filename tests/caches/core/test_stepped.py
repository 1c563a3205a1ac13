"""SteppedDrop: a grouping value's keys dropped in bounded steps on the loop, never served stale."""

from __future__ import annotations

import asyncio

import pytest

from caches.core import BoundedTTLCache, FakeClock, SteppedDrop, Within

Key = tuple[int, int, int]  # (server, user, channel), as personal spotlights


def _user(key: Key) -> tuple[tuple[int, int], ...]:
    return ((key[0], key[1]),) if key[1] else ()  # user 0: a key with no user


def _channel(key: Key) -> tuple[tuple[int, int]]:
    return ((key[0], key[2]),)


def cache(clock: FakeClock) -> BoundedTTLCache[Key, str]:
    return BoundedTTLCache(
        "stepped",
        maxsize=10_000,
        ttl=60,
        clock=clock,
        scopes={
            "user": _user,
            "channel": _channel,
            "server": Within("user", "channel", parent=lambda v: v[0]),
        },
    )


def fill(c: BoundedTTLCache[Key, str], servers: int, users: int, channels: int) -> None:
    for s in range(1, servers + 1):
        for u in range(1, users + 1):
            for ch in range(channels):
                c.set((s, u, ch), f"{s}:{u}:{ch}")


async def until_dropped(drops: SteppedDrop, *, turns: int = 10_000) -> None:
    """Give the loop turns until nothing is pending (a bounded wait: a hang fails)."""
    for _ in range(turns):
        if not drops.pending:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"still pending after {turns} loop turns: {drops.pending}")


def server_keys(c: BoundedTTLCache[Key, str], server: int) -> list[Key]:
    return [k for k, _ in c.items() if k[0] == server]


async def held_load(
    c: BoundedTTLCache[Key, str], key: Key
) -> tuple[asyncio.Task[str], asyncio.Event]:
    """Start a load of `key` that answers "read before the drop" once released."""
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "read before the drop"

    load = asyncio.create_task(c.get_or_load(key, slow))
    await asyncio.sleep(0)  # the load has started
    return load, release


def test_without_a_running_loop_the_drop_is_done_at_once(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=2, users=30, channels=5)
    drops = SteppedDrop(c, "server", via="user", step=10)
    assert drops.drop(1) == 150
    assert server_keys(c, 1) == [] and len(server_keys(c, 2)) == 150
    assert drops.pending == set() and drops.steps == 0


async def test_on_a_loop_each_step_drops_a_bounded_share_until_none_is_left(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=3, users=40, channels=5)  # 200 keys per server, 5 per user
    drops = SteppedDrop(c, "server", via="user", step=20)
    assert drops.drop(2) == 200  # answered at once, with what will go
    assert drops.pending == {2} and len(server_keys(c, 2)) == 200
    left = [200]
    for _ in range(1000):  # bounded: a drop that never ends fails, not hangs
        if not drops.pending:
            break
        await asyncio.sleep(0)  # one loop iteration: at most one step
        left.append(len(server_keys(c, 2)))
    shares = [a - b for a, b in zip(left, left[1:], strict=False)]
    assert max(shares) <= 20  # whole users, never past the step
    assert left[-1] == 0 and drops.steps == 11  # 10 of 20 keys, then the sweep
    # Gone from every index too, and the other servers untouched.
    assert c.keys_in_scope("server", 2) == []
    assert c.grouped_values("server", 2, "user") == []
    assert c.scope_members("channel").keys().isdisjoint({(2, ch) for ch in range(5)})
    assert len(server_keys(c, 1)) == len(server_keys(c, 3)) == 200


async def test_keys_without_a_via_value_go_in_the_last_sweep(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=1, users=3, channels=2)
    c.set((1, 0, 7), "no user")  # only in the channel scope
    drops = SteppedDrop(c, "server", via="user", step=1)
    assert drops.drop(1) == 7  # the stray key is counted too
    await until_dropped(drops)
    assert len(c) == 0


async def test_a_parent_whose_keys_all_lack_a_via_value_is_dropped(fake_clock):
    c = cache(fake_clock)
    for ch in range(10):
        c.set((1, 0, ch), "no user")
    c.set((2, 5, 0), "elsewhere")
    drops = SteppedDrop(c, "server", via="user")
    assert drops.drop(1) == 10
    await until_dropped(drops)
    assert c.keys() == [(2, 5, 0)]


async def test_a_value_larger_than_a_step_goes_key_by_key(fake_clock):
    c = cache(fake_clock)
    for ch in range(100):  # one user, 100 channels: one value of 100 keys
        c.set((1, 7, ch), "v")
    drops = SteppedDrop(c, "server", via="user", step=10)
    assert drops.drop(1) == 100
    left = [100]
    for _ in range(1000):  # bounded: a drop that never ends fails, not hangs
        if not drops.pending:
            break
        await asyncio.sleep(0)
        left.append(len(c))
    assert max(a - b for a, b in zip(left, left[1:], strict=False)) <= 10
    assert left[-1] == 0


async def test_a_load_in_flight_for_a_parent_with_nothing_resident_is_staled(
    fake_clock,
):
    c = cache(fake_clock)
    drops = SteppedDrop(c, "server", via="user")
    load, release = await held_load(c, (1, 9, 0))
    assert drops.drop(1) == 0 and drops.pending == set()
    release.set()
    await load
    assert (1, 9, 0) not in c  # no step ran: the drop itself staled the load


def test_a_loop_that_ends_mid_drop_leaves_nothing_pending(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=2, users=50, channels=4)
    drops = SteppedDrop(c, "server", via="user", step=8)

    async def drop_and_leave() -> int:
        return drops.drop(1)  # asyncio.run then cancels the steps' task

    assert asyncio.run(drop_and_leave()) == 200
    assert drops.pending == set() and server_keys(c, 1) == []
    assert len(server_keys(c, 2)) == 200


async def test_a_failing_step_drops_the_rest_at_once(fake_clock, monkeypatch):
    c = cache(fake_clock)
    fill(c, servers=1, users=20, channels=2)
    drops = SteppedDrop(c, "server", via="user", step=4)

    def broken(scope, values):  # type: ignore[no-untyped-def]
        raise RuntimeError("a bug in a step")

    monkeypatch.setattr(c, "invalidate_scope_values", broken)
    assert drops.drop(1) == 40
    task = drops._tasks[1]
    with pytest.raises(RuntimeError):
        await task
    assert drops.pending == set() and len(c) == 0


async def test_a_load_running_when_the_server_drops_stores_nothing(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=1, users=2, channels=1)
    drops = SteppedDrop(c, "server", via="user")
    load, release = await held_load(c, (1, 9, 0))
    assert drops.drop(1) == 2
    release.set()
    assert await load == "read before the drop"  # its caller gets it
    await until_dropped(drops)
    assert (1, 9, 0) not in c  # but the cache does not keep it


async def test_nothing_to_drop_marks_nothing_pending(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=1, users=2, channels=1)
    drops = SteppedDrop(c, "server", via="user")
    assert drops.drop(5) == 0 and drops.pending == set()


async def test_dropping_again_while_pending_runs_one_chain(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=1, users=10, channels=2)
    drops = SteppedDrop(c, "server", via="user", step=4)
    assert drops.drop(1) == 20
    await asyncio.sleep(0)
    assert drops.drop(1) == 16  # what is left
    await until_dropped(drops)
    assert len(c) == 0 and drops.steps == 6  # 5 of 4 keys, then the sweep


async def test_expired_keys_are_not_counted(fake_clock):
    c = cache(fake_clock)
    fill(c, servers=1, users=2, channels=1)
    fake_clock.advance(61)
    c.set((1, 3, 0), "fresh")
    assert SteppedDrop(c, "server", via="user").drop(1) == 1


def test_a_scope_the_grouping_does_not_group_is_refused(fake_clock):
    c = BoundedTTLCache(
        "plain",
        maxsize=10,
        scopes={"user": _user, "server": Within("user", parent=lambda v: v[0])},
    )
    c2 = cache(fake_clock)
    with pytest.raises(KeyError):
        SteppedDrop(c, "server", via="channel")
    with pytest.raises(KeyError):
        SteppedDrop(c2, "user", via="user")  # not a grouping


async def test_a_key_under_two_via_values_is_counted_and_dropped_once(fake_clock):
    # Whitelist-shaped: a thread's key is under its own channel and its parent's.
    c = BoundedTTLCache(
        "threads",
        maxsize=100,
        clock=fake_clock,
        scopes={
            "channel": lambda k: (
                ((k[0], k[1]),) if not k[2] else ((k[0], k[1]), (k[0], k[2]))
            ),
            "server": Within("channel", parent=lambda v: v[0]),
        },
    )
    for channel in range(10, 20):
        c.set((1, channel, 0), "channel")
        c.set((1, channel + 100, channel), "its thread")
    c.set((2, 10, 0), "elsewhere")
    assert c.grouped_size("server", 1, "channel") == 20
    drops = SteppedDrop(c, "server", via="channel", step=3)
    assert drops.drop(1) == 20
    await until_dropped(drops)
    assert c.keys() == [(2, 10, 0)]
    assert c.scope_members("channel") == {(2, 10): {(2, 10, 0)}}
