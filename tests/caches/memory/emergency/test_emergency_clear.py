"""The emergency clear: policy per cache, STM, disabled mode, failures, real deltas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from caches.core import BoundedTTLCache, FakeClock
from caches.memory.emergency import EmergencyClearResult, clear_emergency_caches
from caches.registry import EmergencyPolicy

MIB = 1024 * 1024


def _cache(
    name: str, entries: int, *, clock: FakeClock | None = None, ttl: float | None = None
) -> BoundedTTLCache:
    cache: BoundedTTLCache = BoundedTTLCache(
        name, maxsize=100_000, ttl=ttl, clock=clock or FakeClock()
    )
    for index in range(entries):
        cache.set(index, f"{name}-{index}")
    return cache


@pytest.fixture
def stm(isolated_registry: Any) -> BoundedTTLCache:
    """Register short-term memory with two expired entries and one live one."""
    clock = FakeClock()
    cache = _cache("short_term_memory", 2, clock=clock, ttl=60)
    cache.set("live", "still talking", ttl=3600)
    clock.advance(61)  # nothing reads or writes after this: expired yet resident
    isolated_registry.register(
        "short_term_memory", cache, policy=EmergencyPolicy.EXPIRED_ONLY
    )
    return cache


@pytest.fixture
def layers(isolated_registry: Any, stm: BoundedTTLCache) -> dict[str, BoundedTTLCache]:
    caches = {
        "user": _cache("user", 3),
        "channel_whitelist": _cache("channel_whitelist", 4),
        "llm": _cache("llm", 2),
    }
    isolated_registry.register("user", caches["user"], policy=EmergencyPolicy.CLEAR)
    isolated_registry.register(
        "channel_whitelist", caches["channel_whitelist"], policy=EmergencyPolicy.CLEAR
    )
    isolated_registry.register("llm", caches["llm"], policy=EmergencyPolicy.PRESERVE)
    return {**caches, "short_term_memory": stm}


def test_each_cache_gets_its_policy(
    layers: dict[str, BoundedTTLCache], metric_lines: Any
):
    result = clear_emergency_caches(source="test", collect_before_measuring=False)
    assert dict(result.cleared) == {
        "user": 3,
        "channel_whitelist": 4,
        "short_term_memory": 2,
    }
    assert result.preserved == ("llm",)
    assert result.total_cleared == 9 and not result.failed_steps
    assert len(layers["user"]) == len(layers["channel_whitelist"]) == 0
    assert len(layers["llm"]) == 2
    assert layers["short_term_memory"].peek("live") == "still talking"
    (line,) = metric_lines.named("emergency_cache_clear")
    assert line["total_cleared"] == 9 and line["cleared"]["user"] == 3
    assert line["source"] == "test" and line["include_stm"] is False


def test_short_term_memory_is_wiped_only_when_included(
    layers: dict[str, BoundedTTLCache],
):
    result = clear_emergency_caches(
        include_short_term_memory=True, collect_before_measuring=False
    )
    assert result.include_stm and result.cleared["short_term_memory"] == 3
    assert len(layers["short_term_memory"]) == 0


@override_settings(EMERGENCY_CACHE_CLEAR_INCLUDE_STM=True)
def test_include_stm_setting_is_the_default(layers: dict[str, BoundedTTLCache]):
    clear_emergency_caches(collect_before_measuring=False)
    assert len(layers["short_term_memory"]) == 0


@override_settings(EMERGENCY_CACHE_CLEAR_ENABLED=False)
def test_disabled_clear_is_a_logged_noop(
    layers: dict[str, BoundedTTLCache], metric_lines: Any
):
    result = clear_emergency_caches(source="memory_guard")
    assert result.skipped and result.total_cleared == 0
    assert all(len(cache) for cache in layers.values())
    (line,) = metric_lines.named("emergency_cache_clear")
    assert line["skipped"] is True and line["source"] == "memory_guard"


class BrokenCache(BoundedTTLCache):
    """A cache whose clear fails while ``broken`` is set."""

    broken = True

    def clear(self) -> int:
        if self.broken:
            raise RuntimeError("cannot clear")
        return super().clear()


@pytest.fixture
def broken_webhook(isolated_registry: Any) -> Iterator[BrokenCache]:
    cache = BrokenCache("webhook", maxsize=10)
    cache.set("a", 1)
    isolated_registry.register("webhook", cache, policy=EmergencyPolicy.CLEAR)
    yield cache
    cache.broken = False  # the suite's teardown clears every registered cache


def test_a_failed_step_is_recorded_and_the_others_still_run(
    broken_webhook: BrokenCache,
    layers: dict[str, BoundedTTLCache],
    metric_lines: Any,
):
    # The broken cache is registered first: its failure must not stop the rest.
    result = clear_emergency_caches(collect_before_measuring=False)
    assert dict(result.failed_steps) == {"webhook": "RuntimeError"}
    assert result.cleared["user"] == 3 and "webhook" not in result.cleared
    assert len(layers["channel_whitelist"]) == 0 and len(broken_webhook) == 1
    (line,) = metric_lines.named("emergency_cache_clear")
    assert line["failed_steps"] == {"webhook": "RuntimeError"}


def test_result_is_frozen_and_flattens_memory_fields(
    layers: dict[str, BoundedTTLCache],
):
    result = clear_emergency_caches(collect_before_measuring=False)
    assert isinstance(result, EmergencyClearResult)
    with pytest.raises(AttributeError):
        result.source = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.cleared["user"] = 0  # type: ignore[index]
    fields = result.as_dict()
    for key in ("rss_mb", "python_allocated_blocks"):
        assert {f"{key}_before", f"{key}_after", f"{key}_delta_clear"} <= set(fields)


def test_clearing_large_values_really_lowers_rss(isolated_registry: Any):
    # A long-running process: freeing a big block raises glibc's mmap threshold,
    # so later 1 MiB values land in the heap rather than in their own mappings.
    big = b"x" * (20 * MIB)
    del big
    cache = BoundedTTLCache("voice_transcript", maxsize=1000)
    survivors = []
    for index in range(50):
        cache.set(index, bytes([index % 251]) * MIB)
        # Live blocks between the values fragment the heap: only malloc_trim
        # hands the freed pages back.
        survivors.append(b"s" * (200 * 1024))
    isolated_registry.register("voice_transcript", cache, policy=EmergencyPolicy.CLEAR)
    result = clear_emergency_caches()
    assert result.cleared["voice_transcript"] == 50
    assert result.memory_delta["rss_mb"] <= -40
    assert result.as_dict()["rss_mb_delta_clear"] == result.memory_delta["rss_mb"]
    assert len(survivors) == 50


def test_clearing_many_small_values_lowers_the_python_heap(isolated_registry: Any):
    cache = BoundedTTLCache("channel_whitelist", maxsize=100_000)
    for index in range(50_000):
        cache.set(
            f"1:{index}:0:roles", {"allowed": index % 2 == 0, "personas": [index]}
        )
    isolated_registry.register("channel_whitelist", cache, policy=EmergencyPolicy.CLEAR)
    result = clear_emergency_caches()
    # Each entry holds a key string, a dict, a list and an int: 4 blocks or more.
    assert result.memory_delta["python_allocated_blocks"] <= -150_000
