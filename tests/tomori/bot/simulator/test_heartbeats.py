"""Heartbeats are acknowledged as Discord does: discord.py never reports itself behind."""

from __future__ import annotations

import asyncio

import pytest
from discord.gateway import KeepAliveHandler

from tomori.bot.simulator import SimulatedDiscord

from .conftest import StartClient

BEATS = 6
INTERVAL_MS = 1000
ROUND_TRIP_SECONDS = 0.02


@pytest.fixture
def acks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """Record (the heartbeat's send time, the ACK's time) at every HEARTBEAT_ACK."""
    seen: list[tuple[float, float]] = []
    original = KeepAliveHandler.ack

    def ack(self: KeepAliveHandler) -> None:
        original(self)
        seen.append((self._last_send, self._last_ack))

    monkeypatch.setattr(KeepAliveHandler, "ack", ack)
    return seen


async def test_every_ack_follows_its_heartbeat(
    sim: SimulatedDiscord,
    start_client: StartClient,
    acks: list[tuple[float, float]],
    caplog,
):
    sim.gateway.heartbeat_interval_ms = INTERVAL_MS
    await start_client()
    async with asyncio.timeout(BEATS * INTERVAL_MS / 1000 * 3 + 10):
        while len(acks) < BEATS:
            await asyncio.sleep(INTERVAL_MS / 1000)

    # Each ACK answers the heartbeat sent after the ACK before it (one that
    # overtook its send time would pair with the previous one, and discord.py
    # would count a whole interval of latency): order, not speed, so a slow
    # host cannot fail it.
    for (_, earlier_ack), (sent, _) in zip(acks, acks[1:], strict=False):
        assert sent > earlier_ack, acks
    # After a round trip, as Discord answers: discord.py has noted the send.
    assert min(ack - sent for sent, ack in acks) >= ROUND_TRIP_SECONDS
    assert "Can't keep up" not in caplog.text
