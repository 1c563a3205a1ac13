"""Heartbeats are acknowledged as Discord does: discord.py never reports itself behind."""

from __future__ import annotations

import asyncio

import pytest
from discord.gateway import KeepAliveHandler

from tomori.bot.simulator import SimulatedDiscord

from .conftest import StartClient

BEATS = 12
INTERVAL_MS = 300
ROUND_TRIP_SECONDS = 0.02


@pytest.fixture
def latencies(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the latency discord.py computes at every HEARTBEAT_ACK."""
    seen: list[float] = []
    original = KeepAliveHandler.ack

    def ack(self: KeepAliveHandler) -> None:
        original(self)
        seen.append(self.latency)

    monkeypatch.setattr(KeepAliveHandler, "ack", ack)
    return seen


async def test_every_ack_follows_its_heartbeat(
    sim: SimulatedDiscord, start_client: StartClient, latencies: list[float], caplog
):
    sim.gateway.heartbeat_interval_ms = INTERVAL_MS
    await start_client()
    async with asyncio.timeout(BEATS * INTERVAL_MS / 1000 * 3 + 10):
        while len(latencies) < BEATS:
            await asyncio.sleep(INTERVAL_MS / 1000)

    # An ACK that overtook the send time would count a whole interval.
    assert max(latencies) < INTERVAL_MS / 1000 / 2, latencies
    # After a round trip, as Discord answers: discord.py has noted the send.
    assert min(latencies) >= ROUND_TRIP_SECONDS
    assert "Can't keep up" not in caplog.text
