"""discord.py cache counts, the spec's sweepers and the volatile clear, on a real client."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from caches.core import FakeClock
from caches.discord_caches import (
    SweepIntervals,
    clear_discord_volatile,
    count_discord_caches,
    count_presences,
    recent_presences,
    run_discord_sweepers,
    sweep_bot_users,
    sweep_members,
    sweep_messages,
    sweep_presences,
)

if TYPE_CHECKING:
    from tomori.bot.simulator import SimulatedDiscord


def _voice_member_ids(sim: SimulatedDiscord) -> dict[int, set[int]]:
    return {gid: set(g.voice) for gid, g in sim.world.guilds.items()}


async def test_counts_match_the_simulated_world(client: Any, sim: SimulatedDiscord):
    totals = sim.world.totals()
    counts = count_discord_caches(client)
    assert counts["discord_guilds"] == totals["guilds"]
    assert counts["discord_members"] == totals["members"]
    assert counts["discord_users"] == totals["users"]
    assert counts["discord_presences"] == totals["presences"]
    assert counts["discord_voice_states"] == totals["voice_states"]
    assert counts["discord_threads"] == totals["threads"]
    assert counts["discord_emojis"] == totals["emojis"]
    assert counts["discord_stickers"] == totals["stickers"]
    assert counts["discord_messages"] == 0


async def test_a_recent_presence_count_is_reused_until_it_is_too_old(
    client: Any, monkeypatch: pytest.MonkeyPatch
):
    from caches import discord_caches

    scans: list[int] = []
    real = discord_caches.count_presences

    def counted(of: Any) -> int:
        scans.append(1)
        return real(of)

    monkeypatch.setattr(discord_caches, "count_presences", counted)
    first = recent_presences(client, max_age=60)
    assert first == real(client) > 0
    assert recent_presences(client, max_age=60) == first
    assert (
        count_discord_caches(client, presences_max_age=60)["discord_presences"] == first
    )
    assert len(scans) == 1
    count_discord_caches(client)  # the default counts now
    recent_presences(client, max_age=0)
    assert len(scans) == 3


async def test_member_sweep_keeps_own_member_and_voice_members(
    client: Any, sim: SimulatedDiscord
):
    voice = _voice_member_ids(sim)
    assert any(voice.values()), "the scenario must put someone in voice"
    removed = sweep_members(client)
    assert removed > 0
    for guild in client.guilds:
        assert guild.me is not None  # permissions resolve through it
        assert set(guild._members) == voice[guild.id] | {client.user.id}


async def test_swept_member_comes_back_with_their_next_message(
    client: Any, sim: SimulatedDiscord
):
    sweep_members(client)
    guild = sim.world.guild(
        max(sim.world.guilds, key=lambda g: len(sim.world.guilds[g].members))
    )
    speaker = next(
        m.user.id
        for m in guild.members.values()
        if m.user.id not in guild.voice and not m.user.bot
    )
    channel = next(c.id for c in guild.channels if c.type == 0)
    await sim.member_speaks(guild.id, speaker, channel, "hello again")
    await client.wait_for_message_count(1)
    message = client.cached_messages[-1]
    assert message.author.id == speaker  # an uncached Member built from the event


async def test_message_sweep_drops_old_messages_in_place(
    client: Any, sim: SimulatedDiscord
):
    await sim.send_messages(30)
    await client.wait_for_message_count(30)
    cached = client._connection._messages
    assert len(cached) == 30
    now = time.time()
    assert sweep_messages(client, lifetime_seconds=1800, now=now) == 0
    assert sweep_messages(client, lifetime_seconds=1800, now=now + 3600) == 30
    assert client._connection._messages is cached and cached.maxlen == 100


async def test_bot_user_sweep_drops_bot_members_and_frees_their_users(
    client: Any, sim: SimulatedDiscord
):
    bots = {
        m.user.id
        for g in sim.world.guilds.values()
        for m in g.members.values()
        if m.user.bot and m.user.id != client.user.id
    }
    assert bots
    sweep_bot_users(client)
    for guild in client.guilds:
        cached_bots = {m.id for m in guild.members if m.bot}
        # Only the client itself, or a bot held in voice, may stay.
        assert cached_bots <= {client.user.id} | set(sim.world.guild(guild.id).voice)
    held_in_voice = set().union(*_voice_member_ids(sim).values())
    assert all(client.get_user(b) is None for b in bots - held_in_voice)


async def test_presence_sweep_resets_only_offline_members(
    client: Any, sim: SimulatedDiscord
):
    guild = next(iter(sim.world.guilds.values()))
    offline = next(
        m.user.id for m in guild.members.values() if m.user.id != client.user.id
    )
    online_before = count_presences(client)
    updated = asyncio.ensure_future(client.wait_for("presence_update", timeout=5))
    await sim.presence_update(
        offline,
        status="offline",
        activities=[{"name": "left running", "type": 0}],
        guild_id=guild.id,
    )
    await updated
    member = client.get_guild(guild.id).get_member(offline)
    assert member.activities  # offline, yet still carrying an activity
    assert sweep_presences(client) >= 1
    assert member.activities == ()
    still_online = count_presences(client)
    assert still_online > 0 and still_online <= online_before


async def test_volatile_clear_keeps_the_clients_own_member(
    client: Any, sim: SimulatedDiscord
):
    await sim.send_messages(10)
    await client.wait_for_message_count(10)
    voice = _voice_member_ids(sim)
    cleared = clear_discord_volatile(client)
    assert cleared["discord_messages"] == 10
    assert cleared["discord_bot_members"] > 0
    assert cleared["discord_presences"] > 0
    assert cleared["discord_voice_states"] == sim.world.totals()["voice_states"]
    counts = count_discord_caches(client)
    assert counts["discord_messages"] == counts["discord_voice_states"] == 0
    for guild in client.guilds:
        assert guild.me is not None
        kept = voice[guild.id] | {client.user.id}
        assert not any(m.bot for m in guild.members if m.id not in kept)
    # Only the client's own member keeps a presence.
    assert counts["discord_presences"] <= len(client.guilds)


def _empty_client() -> Any:
    state = SimpleNamespace(
        _guilds={}, _messages=deque(maxlen=10), self_id=1, _users={}
    )
    return SimpleNamespace(_connection=state)


async def test_sweepers_run_each_at_its_own_interval(metric_lines: Any):
    clock = FakeClock(100.0)
    stop = asyncio.Event()
    waits: list[float] = []

    async def wait(_stop: asyncio.Event, seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)
        if clock() >= 100.0 + 60:
            stop.set()

    intervals = SweepIntervals(
        messages=10, message_lifetime=5, members=30, users=60, presences=20
    )
    await run_discord_sweepers(
        _empty_client(), stop=stop, intervals=intervals, clock=clock, wait=wait
    )
    ran = [
        set(line) - {"metric", "ts", "duration_ms"}
        for line in metric_lines.named("discord_sweep")
    ]
    assert ran == [
        {"messages"},  # t=10
        {"messages", "presences"},  # t=20
        {"messages", "members"},  # t=30
        {"messages", "presences"},  # t=40
        {"messages"},  # t=50
    ]
    assert waits == [10, 10, 10, 10, 10, 10]


async def test_a_failing_sweeper_does_not_stop_the_others(metric_lines: Any):
    client = _empty_client()
    client._connection._guilds = None  # every guild walk now fails
    clock = FakeClock(0.0)
    stop = asyncio.Event()

    async def wait(_stop: asyncio.Event, seconds: float) -> None:
        clock.advance(seconds)
        stop.set() if clock() > 10 else None

    intervals = SweepIntervals(
        messages=10, message_lifetime=5, members=10, users=10, presences=10
    )
    await run_discord_sweepers(
        client, stop=stop, intervals=intervals, clock=clock, wait=wait
    )
    (line,) = metric_lines.named("discord_sweep")
    assert line["messages"] == 0
    assert line["members"] == line["bot_users"] == line["presences"] == -1


@pytest.mark.parametrize("maxlen", [None, 5])
def test_message_sweep_without_a_message_cache_is_a_noop(maxlen: int | None):
    client = _empty_client()
    if maxlen is None:
        client._connection._messages = None
    assert sweep_messages(client, lifetime_seconds=1) == 0
