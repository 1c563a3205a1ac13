"""The metrics endpoint over the real client: simulated traffic moves the counters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from caches.registry import registry
from metrics.cache_bytes import CacheBytesEstimator
from metrics.prometheus.worker import WorkerObservability
from tests.metrics.scraping import get, parse, total, value
from tests.tomori.bot.pipeline.conftest import Bot

pytestmark = pytest.mark.e2e


@pytest.fixture
async def observed(bot: Bot) -> AsyncIterator[WorkerObservability]:
    """Serve the endpoint for the running bot, as `runbot` does with METRICS_PORT."""
    worker = SimpleNamespace(
        worker_id="sim:1",
        started_at=0.0,
        stop_event=asyncio.Event(),
        client=bot.client,
        pipeline=bot.pipeline,
        guard=None,
        options=SimpleNamespace(shard_ids=None, shard_count=None),
        cache_bytes=CacheBytesEstimator(registry, sample=16),
    )
    observability = WorkerObservability(
        worker,
        address="127.0.0.1",
        port=0,
        refresh_seconds=60,
        size_sample=16,
        memory_limit_bytes=2**32,
    )
    observability.start()
    yield observability
    observability.stop()


async def _scrape(observability: WorkerObservability) -> str:
    # On the loop, as the worker's timers do.
    await observability.worker.cache_bytes.refresh()
    await observability.refresh()
    status, body = await asyncio.to_thread(get, observability.endpoint.url + "/metrics")
    assert status == 200
    return body


async def test_traffic_moves_turns_hits_and_discord_counts(
    bot: Bot, observed: WorkerObservability
) -> None:
    await bot.send_traffic(30)  # concurrent first misses share loads: warm first
    before = parse(await _scrape(observed))
    await bot.send_traffic(60)
    after = parse(await _scrape(observed))
    turns = bot.pipeline.counters.turns
    assert (
        total(after, "tomori_turns_total")
        == turns
        > total(before, "tomori_turns_total")
    )
    assert total(after, "tomori_turn_duration_seconds_count") == turns
    assert (
        value(after, "tomori_messages_received_total") == bot.pipeline.counters.received
    )
    for cache in ("tomori_state", "user", "channel_whitelist"):
        assert value(after, "tomori_cache_hits_total", cache=cache) > value(
            before, "tomori_cache_hits_total", cache=cache
        ), cache
    assert value(after, "tomori_cache_estimated_bytes", cache="user") > 0
    assert value(after, "tomori_discord_cache_entries", cache="guilds") == 5
    assert value(after, "tomori_discord_cache_entries", cache="members") > 0
    assert value(after, "tomori_discord_cache_entries", cache="messages") > 0
    assert value(after, "tomori_gateway_connected") == 1
