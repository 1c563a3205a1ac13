"""Fixtures: a seeded small world, the simulator, and the real bot client on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from caches import bus
from caches.layers.short_term_memory import flush_pending_writes
from tomori.bot.client import TomoriClientMixin, build_client, skip_identify_wait
from tomori.bot.demo import seed_world
from tomori.bot.pipeline import MessagePipeline, ResolvedTurn
from tomori.bot.pipeline.responder import RecordingResponder
from tomori.bot.simulator import (
    Scenario,
    SimulatedDiscord,
    World,
    generate_world,
    pointed_at,
)
from tomori.bot.simulator.world import TEXT_CHANNEL

READY_TIMEOUT = 15.0
EVENT_TIMEOUT = 10.0
TOKEN = "simulated-token"


@pytest.fixture(autouse=True)
def local_bus() -> Iterator[bus.Bus]:
    """Give each test an in-process bus (no Redis traffic unless a test asks)."""
    local = bus.configure(redis_url="", channel="tomori:test:bot")
    yield local
    bus.configure(redis_url="", channel="tomori:test:bot")


@pytest.fixture
def world() -> World:
    """Return the small scenario's world (5 guilds, ~400 members)."""
    return generate_world(Scenario.small())


@pytest.fixture
def seeded(world: World, transactional_db: Any) -> dict[str, int]:
    """Seed the demo rows for the world's guilds; return the created counts."""
    return seed_world(world)


@pytest.fixture
async def sim(world: World) -> AsyncIterator[SimulatedDiscord]:
    """Serve the simulated Discord for the world."""
    simulator = SimulatedDiscord(Scenario.small(), world=world)
    await simulator.start()
    yield simulator
    await simulator.stop()


@dataclass
class Bot:
    """The running client with its pipeline and responder, plus speaking helpers."""

    client: Any
    pipeline: MessagePipeline
    responder: RecordingResponder
    sim: SimulatedDiscord

    async def speak(
        self, guild_id: int, user_id: int, channel_id: int, content: str = "hello"
    ) -> ResolvedTurn | None:
        """Have a member say something; return its turn (None if skipped)."""
        target = self.pipeline.counters.processed + 1
        message_id = await self.sim.member_speaks(
            guild_id, user_id, channel_id, content
        )
        await self.pipeline.wait_processed(target, timeout=EVENT_TIMEOUT)
        return self.responder.latest(message_id=message_id)

    async def ask(
        self, guild_id: int, user_id: int, channel_id: int, content: str = "hello"
    ) -> ResolvedTurn | None:
        """Have a member say something to the bot (a mention: a turn that answers)."""
        mention = f"<@{self.client.user.id}> {content}"
        return await self.speak(guild_id, user_id, channel_id, mention)

    async def send_traffic(self, count: int) -> dict[str, int]:
        """Send `count` scenario messages; wait for all; return them by author kind."""
        kinds = {"member": 0, "bot": 0, "webhook": 0}
        target = self.pipeline.counters.processed
        for _ in range(count):
            planned = self.sim.traffic.next()
            if await self.sim.send_planned(planned):
                kinds[planned.kind] += 1
                target += 1
        await self.pipeline.wait_processed(target, timeout=60)
        return kinds


@pytest.fixture
async def bot(sim: SimulatedDiscord, seeded: dict[str, int]) -> AsyncIterator[Bot]:
    """Start the real TomoriClient on the simulator and wait for on_ready."""
    responder = RecordingResponder(keep_last=1000)
    pipeline = MessagePipeline(responder=responder)
    async with running_client(sim, pipeline) as client:
        yield Bot(client, pipeline, responder, sim)
    await flush_pending_writes()
    await sync_to_async(_close_connection)()  # the database thread's connection


@asynccontextmanager
async def running_client(
    sim: SimulatedDiscord, pipeline: MessagePipeline
) -> AsyncIterator[Any]:
    """Run the real TomoriClient with `pipeline` on the simulator until on_ready; close it after."""
    with pointed_at(sim):
        client = build_client(
            pipeline=pipeline,
            before_identify_hook=skip_identify_wait,
            guild_ready_timeout=0.05,
        )
        task = asyncio.create_task(client.start(TOKEN))
        await _until_ready(client, task)
        try:
            yield client
        finally:
            await client.close()
            await asyncio.wait_for(task, READY_TIMEOUT)


class GatedResponder(RecordingResponder):
    """Record each turn once the gate opens; count the turns that reached it."""

    def __init__(self) -> None:
        super().__init__(keep_last=100)
        self.gate = asyncio.Event()
        self.entered: list[int] = []  # message ids, in the order turns arrived
        self.most_at_once = 0
        self._inside = 0
        self._arrived = asyncio.Condition()

    async def respond(self, turn: ResolvedTurn) -> None:
        self.entered.append(turn.message_id)
        self._inside += 1
        self.most_at_once = max(self.most_at_once, self._inside)
        async with self._arrived:
            self._arrived.notify_all()
        await self.gate.wait()
        self._inside -= 1
        await super().respond(turn)

    async def until_entered(self, count: int) -> None:
        """Return once `count` turns have reached the responder."""
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.entered) >= count),
                EVENT_TIMEOUT,
            )


def _close_connection() -> None:
    connection.close()


async def _until_ready(client: TomoriClientMixin, task: asyncio.Task[None]) -> None:
    ready = asyncio.create_task(client.ready_event.wait())
    done, _ = await asyncio.wait(
        {ready, task}, timeout=READY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
    )
    if task in done:
        ready.cancel()
        task.result()
        raise AssertionError("client stopped before becoming ready")
    if ready not in done:
        ready.cancel()
        raise AssertionError("client did not become ready in time")


def human_member(world: World, guild_id: int, *, index: int = 0) -> int:
    """Return the id of a non-bot member of a guild (the index-th, by id)."""
    guild = world.guilds[guild_id]
    humans = sorted(u for u, m in guild.members.items() if not m.user.bot)
    return humans[index]


def text_channel(world: World, guild_id: int, *, index: int = 0) -> int:
    """Return the id of a text channel of a guild (the index-th)."""
    texts = [c.id for c in world.guilds[guild_id].channels if c.type == TEXT_CHANNEL]
    return texts[index]


@sync_to_async
def blacklisted_users(guild_id: int) -> set[int]:
    """Return the Discord ids of the users blacklisted in a guild."""
    from tomori.domain.models import UserBlacklist

    return set(
        UserBlacklist.objects.filter(server__server_disc_id=guild_id).values_list(
            "user__user_disc_id", flat=True
        )
    )


async def allowed_member(world: World, guild_id: int, *, index: int = 0) -> int:
    """Return a non-bot member of the guild who is not blacklisted there."""
    barred = await blacklisted_users(guild_id)
    guild = world.guilds[guild_id]
    humans = sorted(
        u for u, m in guild.members.items() if not m.user.bot and u not in barred
    )
    return humans[index]


def busiest_guild(world: World) -> int:
    """Return the largest guild: always configured and never whitelisted by the seed."""
    return max(world.guilds.values(), key=lambda g: (g.member_count, -g.id)).id
