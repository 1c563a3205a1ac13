"""Sharded clients get every guild; RECONNECT resumes without losing events."""

from __future__ import annotations

import dataclasses

import pytest

from tomori.bot.simulator import Scenario, SimulatedDiscord
from tomori.bot.simulator.world import shard_of

from .conftest import EVENT_TIMEOUT, RecordingShardedClient, StartClient


async def test_auto_sharded_client_gets_every_guild_across_two_shards(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client(RecordingShardedClient, shard_count=2)
    assert {g.id for g in client.guilds} == set(sim.world.guilds)
    assert all(g.shard_id == shard_of(g.id, 2) for g in client.guilds)
    assert {g.shard_id for g in client.guilds} == {0, 1}
    assert sim.stats.identifies == 2 and sim.all_shards_ready.is_set()
    assert await sim.send_messages(100) == 100
    messages = await client.wait_for_messages(100)
    assert {m.guild.shard_id for m in messages} == {0, 1}


@pytest.fixture
def scenario() -> Scenario:
    return dataclasses.replace(Scenario.small(), recommended_shards=2)


async def test_auto_sharded_client_asks_gateway_bot_for_the_shard_count(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client(RecordingShardedClient)
    assert client.shard_count == 2
    assert len(client.guilds) == len(sim.world.guilds)


async def test_reconnect_resumes_and_replays_missed_events(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    resumed = client.wait_for("resumed", timeout=EVENT_TIMEOUT)
    assert await sim.send_reconnect() == 1
    # Sent while the shard is away: kept for the RESUME, not delivered now.
    assert await sim.send_messages(20) == 0
    await resumed
    assert len(await client.wait_for_messages(20)) == 20
    assert sim.stats.resumes == 1 and sim.stats.identifies == 1
    assert await sim.send_messages(5) == 5
    await client.wait_for_messages(25)


async def test_unknown_session_is_invalidated_and_the_client_identifies_again(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    sim.gateway.sessions.clear()  # Forget the session, as after a gateway restart.
    connected = client.wait_for("connect", timeout=EVENT_TIMEOUT)
    await sim.send_reconnect()
    await connected
    await sim.wait_for_identify(2)
    assert sim.stats.invalid_sessions == 1
    assert await sim.send_messages(5) == 5
    await client.wait_for_messages(5)
