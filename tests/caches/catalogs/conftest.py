"""Fixtures: a fake OpenRouter on loopback, its clocks and a CatalogSet factory."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from caches.catalogs import CatalogSet
from caches.catalogs.fake_server import FakeOpenRouter
from caches.core import FakeClock

MIN_INTERVAL = 60.0
TTL = 3600.0
WALL_START = 1_700_000_000.0


def text_model(model_id: str, **fields: Any) -> dict[str, Any]:
    """Return a minimal text-catalog item; `fields` override or add keys."""
    return {"id": model_id, "name": model_id.title(), "description": "", **fields}


def basic_model(model_id: str) -> dict[str, Any]:
    """Return a minimal embedding/image/video item."""
    return {
        "id": model_id,
        "name": model_id.title(),
        "description": f"{model_id} model",
    }


def starter_catalogs() -> dict[str, list[dict[str, Any]]]:
    """Return one or two models per catalog."""
    return {
        "text": [text_model("openai/gpt-4o"), text_model("anthropic/claude-3.5-haiku")],
        "embedding": [basic_model("openai/text-embedding-3-small")],
        "image": [basic_model("google/gemini-2.5-flash-image")],
        "video": [basic_model("google/veo-3.1")],
    }


@pytest.fixture
def clock(fake_clock: FakeClock) -> FakeClock:
    """Return the monotonic clock the catalogs read (the suite's fake clock)."""
    return fake_clock


@pytest.fixture
def wall_clock() -> FakeClock:
    """Return the wall clock the catalogs stamp fetches with."""
    return FakeClock(WALL_START)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenRouter]:
    async with FakeOpenRouter(catalogs=starter_catalogs()) as fake:
        yield fake


@pytest.fixture
async def make_catalogs(
    server: FakeOpenRouter, clock: FakeClock, wall_clock: FakeClock
) -> AsyncIterator[Callable[..., CatalogSet]]:
    """Build CatalogSets against the fake server; keyword arguments override defaults."""
    made: list[CatalogSet] = []

    def make(**overrides: Any) -> CatalogSet:
        options: dict[str, Any] = {
            "base_url": server.base_url,
            "ttl": TTL,
            "min_interval": MIN_INTERVAL,
            "timeout": 5.0,
            "clock": clock,
            "wall_clock": wall_clock,
        }
        catalogs = CatalogSet(**(options | overrides))
        made.append(catalogs)
        return catalogs

    yield make
    for catalogs in made:
        await catalogs.aclose()


class ThreadedOpenRouter:
    """A FakeOpenRouter served from its own event loop thread, for sync tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.fake = FakeOpenRouter(catalogs=starter_catalogs())
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> FakeOpenRouter:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.start(), self.loop).result(10)
        return self.fake

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


@pytest.fixture
def openrouter() -> Iterator[FakeOpenRouter]:
    with ThreadedOpenRouter() as fake:
        yield fake
