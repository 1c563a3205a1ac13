"""Shutdown on the real client: the intake closes at once, running turns end, replies keep HTTP.

What `BotWorker.shutdown` does in order (tests/tomori/bot/worker/ runs it
whole): close the intake, close the gateway, let the running turns finish
(or cancel them at the deadline), close the HTTP session last. Turns are
held at `GatedResponder`, after their short-term memory is stored; a reply
is held in flight by holding the simulated Discord's answer to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from caches.layers.short_term_memory import flush_pending_writes
from tests.tomori.bot.pipeline.conftest import (
    EVENT_TIMEOUT,
    Bot,
    GatedResponder,
    allowed_member,
    busiest_guild,
    running_client,
    text_channel,
)
from tomori.bot.pipeline import MessagePipeline
from tomori.bot.pipeline.responder import ReplyingResponder
from tomori.bot.simulator import SimulatedDiscord, World
from tomori.bot.simulator.payloads import Payload
from tomori.domain.models import ShortTermMemoryRecord

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Gated:
    """The real client with two turn workers whose turns wait at a gate."""

    client: Any
    sim: SimulatedDiscord
    world: World

    @property
    def pipeline(self) -> MessagePipeline:
        return self.client.pipeline  # type: ignore[no-any-return]

    @property
    def responder(self) -> GatedResponder:
        return self.pipeline.responder  # type: ignore[return-value]

    async def say(self, count: int, *, held: int = 0) -> int:
        """Have one member say `count` messages (OK turns); return the member.

        Returns once on_message saw each, and `held` turns wait at the gate.
        """
        guild, user, channel = await _speaker(self.world)
        seen = self.client.counters["messages"]
        asks = f"<@{self.world.bot_user.id}>"  # turns that answer: they capture
        for n in range(count):
            await self.sim.member_speaks(guild, user, channel, f"{asks} message {n}")
        await self.client.wait_for_count(
            "messages", seen + count, timeout=EVENT_TIMEOUT
        )
        await self.responder.until_entered(held)
        return user


@pytest.fixture
async def gated(
    sim: SimulatedDiscord, world: World, seeded: dict[str, int]
) -> AsyncIterator[Gated]:
    """Start the real client with two turn workers and a gated responder."""
    responder = GatedResponder()
    pipeline = MessagePipeline(responder=responder, workers=2, max_waiting=10)
    async with running_client(sim, pipeline) as client:
        try:
            yield Gated(client, sim, world)
        finally:
            responder.gate.set()
    await flush_pending_writes()


async def _speaker(world: World) -> tuple[int, int, int]:
    """Return (guild, user, channel) whose messages are OK turns (memory stored)."""
    guild = busiest_guild(world)
    return guild, await allowed_member(world, guild), text_channel(world, guild)


@sync_to_async
def stored_turns(user: int) -> int:
    """Return the turns the table holds for `user` (their user-scoped rows)."""
    rows = ShortTermMemoryRecord.objects.filter(scope="user", user_disc_id=user)
    return sum(rows.values_list("turn_count", flat=True))


async def test_a_closed_intake_starts_no_turn_and_drops_what_waits(
    gated: Gated, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline, responder = gated.pipeline, gated.responder
    user = await gated.say(6, held=2)  # two run, four wait

    with caplog.at_level(logging.INFO, logger="tomori.bot.pipeline.core"):
        pipeline.close_intake()
        pipeline.close_intake()  # once only: the worker's stop() and shutdown both ask
    dropped = [r for r in caplog.records if "intake closed" in r.getMessage()]
    assert [r.getMessage() for r in dropped] == [
        "shutdown: intake closed: 4 waiting message(s) dropped before their turn "
        "started; 2 turn(s) running"
    ]
    assert (pipeline.intake.waiting, pipeline.counters.dropped) == (0, 4)

    # A message that reaches on_message now starts no turn.
    await gated.say(1)
    assert pipeline.counters.dropped == 5
    assert pipeline.intake.active == 2 and len(responder.entered) == 2

    responder.gate.set()
    stopped = await pipeline.stop_turns(EVENT_TIMEOUT)
    assert (stopped.finished, stopped.cancelled) == (2, 0)
    counters = pipeline.counters
    assert counters.turns == 2 and counters.processed == counters.received == 7
    await flush_pending_writes()
    assert await stored_turns(user) == 2  # the two that ran, and only they


async def test_turns_running_at_the_deadline_are_cancelled_and_their_memory_is_stored(
    gated: Gated, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline, responder = gated.pipeline, gated.responder
    user = await gated.say(2, held=2)  # both stored their turn, wait at the gate

    with caplog.at_level(logging.INFO):
        stopped = await pipeline.stop_turns(0.0)

    assert (stopped.finished, stopped.cancelled) == (0, 2)
    assert pipeline.intake.active == 0 and responder.total == 0
    assert pipeline.counters.processed == 2 and pipeline.counters.errors == 0
    assert "0 finished, 2 cancelled" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    await flush_pending_writes()
    assert await stored_turns(user) == 2  # acknowledged in the cache: in the table


Release = Callable[[], None]


async def _reply_in_flight(
    bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> tuple[ReplyingResponder, Release]:
    """Mention the bot; return once its reply is in flight (the simulator holds it)."""
    responder = ReplyingResponder(bot.client)
    bot.pipeline.responder = responder
    arrived, release = asyncio.Event(), asyncio.Event()
    echo = bot.sim.echo

    async def held_echo(guild_id: int, message: Payload) -> None:
        arrived.set()
        await release.wait()  # the REST answer waits with it
        await echo(guild_id, message)

    monkeypatch.setattr(bot.sim, "echo", held_echo)
    guild, user, channel = await _speaker(bot.sim.world)
    mention = f"<@{bot.sim.bot_user_id}> still there?"
    await bot.sim.member_speaks(guild, user, channel, mention)
    await asyncio.wait_for(arrived.wait(), EVENT_TIMEOUT)
    return responder, release.set


async def test_a_reply_in_flight_completes_after_the_gateway_closed(
    bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    responder, release = await _reply_in_flight(bot, monkeypatch)
    bot.pipeline.close_intake()
    await bot.client.close_gateway()
    assert bot.client.is_closed()  # no event arrives: discord.py will not reconnect

    release()
    stopped = await bot.pipeline.stop_turns(EVENT_TIMEOUT)

    assert (stopped.finished, stopped.cancelled) == (1, 0)
    assert (responder.replies, responder.reply_failures) == (1, 0)
    assert "Tomori" in bot.sim.sent_messages[-1].content
    await bot.client.close()  # and now the HTTP session
    channel = bot.client.get_partial_messageable(bot.sim.sent_messages[-1].channel_id)
    with pytest.raises(RuntimeError, match="Session is closed"):
        await channel.send("too late")


async def test_a_reply_in_flight_at_the_deadline_is_cancelled_quietly_and_counted(
    bot: Bot, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    responder, release = await _reply_in_flight(bot, monkeypatch)
    await bot.client.close_gateway()

    with caplog.at_level(logging.INFO):
        stopped = await bot.pipeline.stop_turns(0.0)
    release()

    assert (stopped.finished, stopped.cancelled) == (0, 1)
    assert (responder.replies_cancelled, responder.reply_failures) == (1, 0)
    assert "1 cancelled (1 with a reply in flight)" in caplog.text
    assert "failed" not in caplog.text
