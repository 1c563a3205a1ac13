"""Fixtures: an isolated registry, captured metric lines, a metric writer, a simulator client.

Shared by the tests of the emergency clear (tests/caches/memory/emergency),
the Discord caches' sweepers (tests/caches/discord_caches) and the metrics
logger (tests/metrics/logger): each directory's conftest imports the ones
it uses (`metric_rows` is autouse there).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import discord
import pytest

from caches.registry import registry
from metrics import logger as metrics_logger
from metrics.logger import BackgroundMetricWriter
from metrics.repository import MetricSampleRepository

READY_TIMEOUT = 15.0


class MetricLines(logging.Handler):
    """Collect the JSON lines logged on ``tomori.metrics``."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))

    def named(self, name: str) -> list[dict[str, Any]]:
        """Return the lines of one metric, oldest first."""
        return [line for line in self.lines if line["metric"] == name]


@pytest.fixture
def metric_lines() -> Iterator[MetricLines]:
    handler = MetricLines()
    metrics = logging.getLogger("tomori.metrics")
    previous = metrics.level
    metrics.setLevel(logging.INFO)
    metrics.addHandler(handler)
    yield handler
    metrics.removeHandler(handler)
    metrics.setLevel(previous)


@pytest.fixture
def isolated_registry() -> Any:
    """Return the process registry emptied for this test (the next test rebuilds it)."""
    registry.reset()
    return registry


class MemoryRepository:
    """A stand-in metric_samples repository that keeps rows in a list."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, Any]]] = []

    def record_sample(self, name: str, fields: dict[str, Any]) -> bool:
        self.rows.append((name, fields))
        return True

    def named(self, name: str) -> list[dict[str, Any]]:
        """Return the stored fields of one metric, oldest first."""
        return [fields for row_name, fields in self.rows if row_name == name]


def _install_writer(
    monkeypatch: pytest.MonkeyPatch, repository: Any
) -> Iterator[BackgroundMetricWriter]:
    writer = BackgroundMetricWriter(repository)
    monkeypatch.setattr(metrics_logger, "_default_writer", writer)
    yield writer
    writer.flush(timeout=10)
    writer.close(timeout=10)


@pytest.fixture(autouse=True)
def metric_rows(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryRepository]:
    """Send this test's default metric rows to memory (flush the writer to read)."""
    repository = MemoryRepository()
    for writer in _install_writer(monkeypatch, repository):
        repository.writer = writer  # type: ignore[attr-defined]
        yield repository


@pytest.fixture
def db_metric_writer(
    metric_rows: MemoryRepository, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BackgroundMetricWriter]:
    """Send this test's default metric rows to the real metric_samples table."""
    yield from _install_writer(monkeypatch, MetricSampleRepository())


class ReadyClient(discord.Client):
    """A discord.Client that sets an event on ready and records messages."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.ready_event = asyncio.Event()
        self.message_count = 0
        self.message_arrived = asyncio.Event()

    async def on_ready(self) -> None:
        self.ready_event.set()

    async def on_message(self, message: discord.Message) -> None:
        self.message_count += 1
        self.message_arrived.set()

    async def wait_for_message_count(self, count: int) -> None:
        """Wait (on events, never on time) until ``count`` messages arrived."""
        async with asyncio.timeout(5):
            while self.message_count < count:
                self.message_arrived.clear()
                await self.message_arrived.wait()


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    # Imported here so the rest of this directory runs whatever state it is in.
    from tomori.bot.simulator import Scenario, SimulatedDiscord

    simulator = SimulatedDiscord(Scenario.small())
    await simulator.start()
    yield simulator
    await simulator.stop()


@pytest.fixture
async def client(sim: Any) -> AsyncIterator[ReadyClient]:
    """Return a real discord.py client connected to the simulator, chunked and ready."""
    from tomori.bot.simulator import pointed_at

    intents = discord.Intents.default()
    intents.members = intents.presences = intents.message_content = True
    with pointed_at(sim):
        bot = ReadyClient(intents=intents, guild_ready_timeout=0.05, max_messages=100)
        task = asyncio.create_task(bot.start("simulated-token"))
        async with asyncio.timeout(READY_TIMEOUT):
            await bot.ready_event.wait()
        yield bot
        await bot.close()
        await asyncio.wait_for(task, READY_TIMEOUT)
