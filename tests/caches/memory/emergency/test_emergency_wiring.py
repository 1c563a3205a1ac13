"""The emergency clear wired to the memory guard, discord.py and both metric sinks."""

from __future__ import annotations

from typing import Any

import pytest

from caches.core import BoundedTTLCache, FakeClock
from caches.memory.emergency import (
    HANDLER_NAME,
    clear_emergency_caches,
    install_emergency_handler,
)
from caches.memory.guard import MemoryGuard, MemoryState
from caches.registry import EmergencyPolicy
from metrics.logger import BackgroundMetricWriter
from metrics.models import MetricSample

MIB = 1024 * 1024


class Rss:
    """An RSS source moved by hand."""

    def __init__(self, mb: float) -> None:
        self.bytes = int(mb * MIB)

    def __call__(self) -> int:
        return self.bytes


def _guard(rss: Rss, **options: Any) -> MemoryGuard:
    return MemoryGuard(
        limit_bytes=100 * MIB,
        warning_threshold=0.75,
        critical_threshold=0.85,
        cooldown_seconds=60,
        rss_source=rss,
        clock=FakeClock(),
        **options,
    )


@pytest.fixture
def user_cache(isolated_registry: Any) -> BoundedTTLCache:
    cache: BoundedTTLCache = BoundedTTLCache("user", maxsize=100)
    for index in range(5):
        cache.set(index, {"id": index})
    isolated_registry.register("user", cache, policy=EmergencyPolicy.CLEAR)
    return cache


def test_entering_critical_runs_the_clear_and_emits_both_metrics(
    user_cache: BoundedTTLCache, metric_lines: Any, metric_rows: Any
):
    rss = Rss(50)
    guard = _guard(rss)
    install_emergency_handler(guard, client_getter=lambda: None)
    guard.check()
    assert len(user_cache) == 5
    rss.bytes = 90 * MIB
    assert guard.check() is MemoryState.CRITICAL
    assert len(user_cache) == 0 and guard.handler_failures == {}
    entered = metric_lines.named("memory_emergency_entered")
    cleared = metric_lines.named("emergency_cache_clear")
    assert len(entered) == len(cleared) == 1
    assert cleared[0]["source"] == "memory_guard" and cleared[0]["total_cleared"] == 5
    assert metric_rows.writer.flush(timeout=10)
    assert [name for name, _ in metric_rows.rows] == [
        "memory_emergency_entered",
        "emergency_cache_clear",
    ]


def test_handler_keeps_a_metric_sink_the_guard_already_has(user_cache: BoundedTTLCache):
    seen: list[str] = []
    guard = _guard(Rss(90), on_metric=lambda name, fields: seen.append(name))
    install_emergency_handler(guard)
    guard.check()
    assert seen == ["memory_emergency_entered"]
    with pytest.raises(ValueError):
        install_emergency_handler(guard)  # one handler per guard
    guard.remove_emergency_handler(HANDLER_NAME)


@pytest.mark.django_db(transaction=True)
def test_emergency_metrics_land_as_metric_sample_rows(
    user_cache: BoundedTTLCache, db_metric_writer: BackgroundMetricWriter
):
    guard = _guard(Rss(90))
    install_emergency_handler(guard)
    guard.check()
    assert db_metric_writer.flush(timeout=10)
    rows = {row.metric_name: row.fields for row in MetricSample.objects.all()}
    assert set(rows) == {"memory_emergency_entered", "emergency_cache_clear"}
    assert rows["memory_emergency_entered"]["percent"] == 90.0
    clear = rows["emergency_cache_clear"]
    assert clear["cleared"] == {"user": 5} and "rss_mb_delta_clear" in clear


async def test_clear_with_a_client_empties_discord_volatile_caches(
    client: Any, sim: Any, user_cache: BoundedTTLCache
):
    await sim.send_messages(5)
    await client.wait_for_message_count(5)
    result = clear_emergency_caches(client=client, collect_before_measuring=False)
    assert result.discord_volatile
    assert result.discord_cleared["discord_messages"] == 5
    assert result.discord_cleared["discord_voice_states"] > 0
    assert result.total_cleared == 5 + sum(result.discord_cleared.values())
    assert all(guild.me is not None for guild in client.guilds)


async def test_discord_volatile_clear_can_be_switched_off(
    client: Any, sim: Any, user_cache: BoundedTTLCache
):
    await sim.send_messages(3)
    await client.wait_for_message_count(3)
    result = clear_emergency_caches(
        client=client, clear_discord_volatile=False, collect_before_measuring=False
    )
    assert not result.discord_volatile and not result.discord_cleared
    assert len(client.cached_messages) == 3
