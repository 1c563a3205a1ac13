"""The production-sized scenario: ~516 guilds and ~31,800 members in one client."""

from __future__ import annotations

import time

import discord
import pytest

from tomori.bot.simulator import Scenario, SimulatedDiscord

from .conftest import StartClient

pytestmark = pytest.mark.e2e


@pytest.fixture
def scenario() -> Scenario:
    return Scenario.production()


async def test_client_caches_the_production_snapshot_within_seconds(
    sim: SimulatedDiscord, start_client: StartClient
):
    started = time.monotonic()
    client = await start_client(intents=discord.Intents.all(), guild_ready_timeout=0.5)
    assert time.monotonic() - started < 20
    totals = sim.world.totals()
    state = client._connection
    assert len(client.guilds) == totals["guilds"] == 516
    assert sum(len(g._members) for g in client.guilds) == totals["members"]
    assert (
        sum(len(g._channels) + len(g._threads) for g in client.guilds)
        == totals["channels"]
    )
    assert len(state._emojis) == totals["emojis"]
    assert len(state._users) == totals["users"]
    presences = sum(
        1
        for g in client.guilds
        for m in g._members.values()
        if m.status is not discord.Status.offline
    )
    assert presences == totals["presences"]
