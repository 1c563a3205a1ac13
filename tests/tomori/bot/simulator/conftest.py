"""Fixtures: a running small-scenario simulator and discord.py clients on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import discord
import pytest

from tomori.bot.simulator import Scenario, SimulatedDiscord, pointed_at

READY_TIMEOUT = 15.0
EVENT_TIMEOUT = 5.0
TOKEN = "simulated-token"


def full_intents() -> discord.Intents:
    """Return the intents the bot runs with (members, presences, content, ...)."""
    intents = discord.Intents.default()
    intents.members = True
    intents.presences = True
    intents.message_content = True
    return intents


class RecordingMixin:
    """Record on_ready and on_message so tests wait on events, never sleep."""

    def _start_recording(self) -> None:
        self.ready_event = asyncio.Event()
        self.messages: list[discord.Message] = []
        self._arrived = asyncio.Condition()

    async def on_ready(self) -> None:
        self.ready_event.set()

    async def before_identify_hook(
        self, shard_id: int | None, *, initial: bool = False
    ) -> None:
        # discord.py waits 5 s before every non-initial IDENTIFY (2nd shard,
        # re-identify) to respect Discord's limit; the simulator has none.
        return None

    async def on_message(self, message: discord.Message) -> None:
        async with self._arrived:
            self.messages.append(message)
            self._arrived.notify_all()

    async def wait_for_messages(self, count: int) -> list[discord.Message]:
        """Wait until count messages arrived; return them all."""
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.messages) >= count),
                EVENT_TIMEOUT,
            )
        return self.messages


class RecordingClient(RecordingMixin, discord.Client):
    """A plain discord.Client that records events."""

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._start_recording()


class RecordingShardedClient(RecordingMixin, discord.AutoShardedClient):
    """An AutoShardedClient that records events."""

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._start_recording()


StartClient = Callable[..., Awaitable[Any]]


@pytest.fixture
def scenario() -> Scenario:
    return Scenario.small()


@pytest.fixture
async def sim(scenario: Scenario) -> AsyncIterator[SimulatedDiscord]:
    simulator = SimulatedDiscord(scenario)
    await simulator.start()
    yield simulator
    await simulator.stop()


@pytest.fixture
async def start_client(sim: SimulatedDiscord) -> AsyncIterator[StartClient]:
    """Return a factory that starts a client on the simulator and awaits on_ready."""
    running: list[tuple[discord.Client, asyncio.Task[None]]] = []

    async def start(client_class: type = RecordingClient, **options: Any) -> Any:
        options.setdefault("intents", full_intents())
        options.setdefault("guild_ready_timeout", 0.05)
        client = client_class(**options)
        task = asyncio.create_task(client.start(TOKEN))
        running.append((client, task))
        await _until_ready(client, task)
        return client

    with pointed_at(sim):
        yield start
        for client, task in running:
            await client.close()
            await asyncio.wait_for(task, READY_TIMEOUT)


async def _until_ready(client: Any, task: asyncio.Task[None]) -> None:
    ready = asyncio.create_task(client.ready_event.wait())
    done, _ = await asyncio.wait(
        {ready, task}, timeout=READY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
    )
    if task in done:
        ready.cancel()
        task.result()  # Raise why the client stopped.
        raise AssertionError("client stopped before becoming ready")
    if ready not in done:
        ready.cancel()
        raise AssertionError("client did not become ready in time")
