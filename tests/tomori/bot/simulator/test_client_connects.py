"""The real discord.py client logs in, becomes ready and chunks against the simulator."""

from __future__ import annotations

import discord
import pytest

from tomori.bot.simulator import SimulatedDiscord

from .conftest import StartClient, full_intents


def _largest(sim: SimulatedDiscord) -> int:
    return max(sim.world.guilds.values(), key=lambda g: g.member_count).id


async def test_client_becomes_ready_with_the_scenario_counts(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    assert {g.id for g in client.guilds} == set(sim.world.guilds)
    for guild in client.guilds:
        simulated = sim.world.guild(guild.id)
        assert guild.member_count == simulated.member_count
        assert len(guild.members) == simulated.member_count
        assert len(guild.channels) == len(simulated.channels)
        assert len(guild.threads) == len(simulated.threads)
        assert len(guild.emojis) == len(simulated.emojis)
        assert len(guild.stickers) == len(simulated.stickers)
        assert len(guild.roles) == len(simulated.roles)
        assert len(guild.voice_channels) and len(guild.text_channels)
        assert guild.me is not None and guild.me.id == sim.bot_user_id
    assert client.user.id == sim.bot_user_id
    assert sim.stats.identifies == 1


async def test_large_guild_is_chunked_at_startup(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client(chunk_guilds_at_startup=True)
    guild = client.get_guild(_largest(sim))
    assert guild.chunked
    assert len(guild.members) == sim.world.guild(guild.id).member_count
    assert sim.stats.chunk_requests == 1  # Only the large guild needed it.


async def test_unchunked_large_guild_holds_online_voice_and_bot_members(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client(chunk_guilds_at_startup=False)
    guild = client.get_guild(_largest(sim))
    simulated = sim.world.guild(guild.id)
    expected = {m.user.id for m in simulated.online_members()} | set(simulated.voice)
    assert not guild.chunked
    assert {m.id for m in guild.members} == expected | {sim.bot_user_id}
    assert sim.stats.chunk_requests == 0


async def test_chunk_on_demand_returns_every_member(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client(chunk_guilds_at_startup=False)
    guild = client.get_guild(_largest(sim))
    members = await guild.chunk()
    assert len(members) == guild.member_count == len(guild.members)


async def test_without_presence_intent_every_guild_is_chunked(
    sim: SimulatedDiscord, start_client: StartClient
):
    intents = full_intents()
    intents.presences = False
    client = await start_client(intents=intents)
    # Discord then sends only the bot and voice members in GUILD_CREATE.
    assert sim.stats.chunk_requests == len(sim.world.guilds)
    assert all(len(g.members) == g.member_count for g in client.guilds)
    assert all(m.status is discord.Status.offline for m in client.get_all_members())


async def test_presences_and_voice_states_reach_the_cache(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    for guild in client.guilds:
        simulated = sim.world.guild(guild.id)
        online = {m.id for m in guild.members if m.status is not discord.Status.offline}
        assert online == {m.user.id for m in simulated.online_members()}
        assert {
            uid: s.channel.id for uid, s in guild._voice_states.items()
        } == simulated.voice


async def test_fetch_member_uses_the_member_route(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild = client.get_guild(_largest(sim))
    user_id = next(iter(sim.world.guild(guild.id).members))
    member = await guild.fetch_member(user_id)
    assert member.id == user_id


async def test_unknown_routes_are_recorded_and_answer_not_found(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    channel = client.get_guild(_largest(sim)).text_channels[0]
    with pytest.raises(discord.NotFound):
        await channel.fetch_message(1)
    assert sim.unknown_routes[-1].method == "GET"
    assert sim.unknown_routes[-1].path.endswith(f"/channels/{channel.id}/messages/1")
    assert sim.stats.unknown_routes == 1
