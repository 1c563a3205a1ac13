"""The bounded intake on the real client: at most PIPELINE_WORKERS turns, a FIFO queue, shedding.

Turns are held at the responder (`GatedResponder`): each turn stays in
flight until the gate opens, so the test sees how many run at once and what
waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from caches.layers.short_term_memory import flush_pending_writes
from tests.tomori.bot.pipeline.conftest import (
    EVENT_TIMEOUT,
    GatedResponder,
    human_member,
    running_client,
    text_channel,
)
from tomori.bot.pipeline import MessagePipeline
from tomori.bot.pipeline.intake import Intake
from tomori.bot.simulator import SimulatedDiscord, World

pytestmark = pytest.mark.django_db(transaction=True)


Start = Callable[..., Any]


@pytest.fixture
async def start_bot(
    sim: SimulatedDiscord, seeded: dict[str, int]
) -> AsyncIterator[Start]:
    """Start the real client with a gated responder and the given intake bounds."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(*, workers: int, max_waiting: int) -> Any:
            responder = GatedResponder()
            pipeline = MessagePipeline(
                responder=responder, workers=workers, max_waiting=max_waiting
            )
            client = await stack.enter_async_context(running_client(sim, pipeline))
            stack.callback(responder.gate.set)  # first at exit: held turns end
            return client

        yield start
    await flush_pending_writes()


async def _send(
    client: Any, sim: SimulatedDiscord, world: World, count: int
) -> list[int]:
    """Have one member say `count` messages; return when the client got them all."""
    guild = sorted(world.guilds)[0]
    user, channel = human_member(world, guild), text_channel(world, guild)
    ids = [
        await sim.member_speaks(guild, user, channel, f"message {n}")
        for n in range(count)
    ]
    await client.wait_for_count("messages", count, timeout=EVENT_TIMEOUT)
    return ids


async def test_at_most_workers_turns_run_and_the_rest_wait_in_order(
    start_bot: Start, sim: SimulatedDiscord, world: World
) -> None:
    client = await start_bot(workers=2, max_waiting=10)
    pipeline, responder = client.pipeline, client.pipeline.responder

    ids = await _send(client, sim, world, 6)
    await responder.until_entered(2)

    assert responder.entered == ids[:2]  # two turns held, in arrival order
    assert pipeline.intake.waiting == 4
    assert pipeline.counters.received == 6 and pipeline.counters.processed == 0

    responder.gate.set()
    await pipeline.wait_processed(6, timeout=EVENT_TIMEOUT)
    assert responder.entered == ids  # the queue is served first in, first out
    assert responder.most_at_once == 2
    assert pipeline.intake.waiting == 0 and pipeline.intake.active == 0
    assert pipeline.counters.shed == 0
    observed = sum(sum(c.counts) for c in client.turn_timings.by_outcome.values())
    assert observed == 6  # every turn timed, the queued ones from their arrival


async def test_a_full_queue_sheds_its_oldest_message(
    start_bot: Start,
    sim: SimulatedDiscord,
    world: World,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = await start_bot(workers=1, max_waiting=2)
    pipeline, responder = client.pipeline, client.pipeline.responder

    with caplog.at_level(logging.WARNING, logger="tomori.bot.pipeline.core"):
        ids = await _send(client, sim, world, 5)
        await responder.until_entered(1)

    # 1 runs; 2 and 3 waited and were shed by 4 and 5, which wait.
    assert pipeline.counters.shed == 2
    assert pipeline.counters.processed == 2  # the shed ones: counted, unanswered
    assert pipeline.intake.waiting == 2
    assert "PIPELINE_MAX_WAITING" in caplog.text

    responder.gate.set()
    await pipeline.wait_processed(5, timeout=EVENT_TIMEOUT)
    assert responder.entered == [ids[0], ids[3], ids[4]]
    assert pipeline.counters.turns == 3
    # The shed messages stay in the history window of the turns after them.
    last = next(m for m in client.cached_messages if m.id == ids[4])
    assert {ids[1], ids[2]} <= {m.id for m in pipeline.history.window(last)}


async def test_a_quiet_message_runs_in_its_own_event_task() -> None:
    ran: list[tuple[str, asyncio.Task[Any] | None]] = []

    async def run(message: Any, arrived: float) -> None:
        ran.append((message, asyncio.current_task()))

    intake = Intake(run, lambda message: None, workers=4, max_waiting=4)
    task = asyncio.ensure_future(intake.take("hello"))
    await task
    assert ran == [("hello", task)]  # no task of its own: the caller's ran it
    assert intake.active == 0


def test_an_intake_needs_a_worker_and_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        Intake(_never, lambda message: None, workers=0, max_waiting=1)
    with pytest.raises(ValueError, match="at least one worker"):
        Intake(_never, lambda message: None, workers=1, max_waiting=0)


async def _never(message: Any, arrived: float) -> None:
    raise AssertionError("no turn runs")
