"""The worker's Prometheus endpoint in-process: what a scrape shows, and how probes answer."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from caches import bus
from caches.core import BoundedTTLCache, FakeClock
from caches.memory.emergency import clear_emergency_caches
from caches.memory.guard import MemoryGuard
from caches.registry import EmergencyPolicy, registry
from metrics.cache_bytes import CacheBytesEstimator, deep_size, estimate_cache_bytes
from metrics.prometheus.buckets import BucketCounts, TurnTimings
from metrics.prometheus.endpoint import MetricsEndpoint, make_app
from metrics.prometheus.health import LOOP_STALL_SECONDS, WorkerHealth
from metrics.prometheus.sampled import LoopFigures
from metrics.prometheus.worker import WorkerObservability
from tests.metrics.scraping import get, parse, scrape, value
from tomori.domain.knobs import KNOBS_BY_NAME, parse_knob

CACHE = "prom_test"


@pytest.fixture
def test_cache() -> Iterator[BoundedTTLCache[int, str]]:
    """Register a small cache (cleared in an emergency) for the test."""
    cache: BoundedTTLCache[int, str] = BoundedTTLCache(CACHE, maxsize=50, ttl=60)
    registry.register(CACHE, cache, policy=EmergencyPolicy.CLEAR)
    yield cache
    registry.unregister(CACHE)


def _worker(**parts: Any) -> SimpleNamespace:
    return SimpleNamespace(
        worker_id="test:1:shard3",
        started_at=1_700_000_000.0,
        stop_event=asyncio.Event(),
        client=parts.get("client"),
        pipeline=parts.get("pipeline"),
        guard=parts.get("guard"),
        options=SimpleNamespace(shard_ids=[3], shard_count=4),
        consistency=parts.get("consistency"),
        cache_bytes=CacheBytesEstimator(registry, sample=4),
    )


@pytest.fixture
def endpoint() -> Iterator[Any]:
    """Serve a worker endpoint on a free port; yields a factory taking the worker."""
    started: list[WorkerObservability] = []

    def serve(worker: SimpleNamespace, *, size_sample: int = 8) -> WorkerObservability:
        observability = WorkerObservability(
            worker,
            address="127.0.0.1",
            port=0,
            refresh_seconds=60,
            size_sample=size_sample,
            memory_limit_bytes=2**30,
        )
        observability.start()
        started.append(observability)
        return observability

    yield serve
    for observability in started:
        observability.stop()


def test_cache_counters_move_with_reads(test_cache, endpoint) -> None:  # type: ignore[no-untyped-def]
    url = endpoint(_worker()).endpoint.url
    test_cache.set(1, "one")
    test_cache.get(1)
    test_cache.get(2)
    first = scrape(url)
    assert value(first, "tomori_cache_hits_total", cache=CACHE) == 1
    assert value(first, "tomori_cache_misses_total", cache=CACHE) == 1
    assert value(first, "tomori_cache_entries", cache=CACHE) == 1
    assert value(first, "tomori_cache_capacity_entries", cache=CACHE) == 50
    assert value(first, "tomori_cache_ttl_seconds", cache=CACHE) == 60
    for _ in range(5):
        test_cache.get(1)
    test_cache.invalidate(1)
    second = scrape(url)
    assert value(second, "tomori_cache_hits_total", cache=CACHE) == 6
    assert value(second, "tomori_cache_invalidations_total", cache=CACHE) == 1
    assert value(second, "tomori_cache_entries", cache=CACHE) == 0


def test_the_consistency_watcher_is_exported_per_cache(endpoint) -> None:  # type: ignore[no-untyped-def]
    from caches.consistency import NINES_CAP, CacheConsistency, ConsistencyWatcher

    watcher = ConsistencyWatcher(registry, checks_per_second=1, bound_seconds=2)
    watcher.caches["user"] = CacheConsistency(checked=1000, inconsistent=1, repairs=1)
    watcher.caches["st_preset"] = CacheConsistency(checked=0)
    watcher.caches["tomori_state"] = CacheConsistency(checked=50)
    samples = scrape(endpoint(_worker(consistency=watcher)).endpoint.url)
    assert value(samples, "tomori_consistency_checked_total", cache="user") == 1000
    assert value(samples, "tomori_consistency_inconsistent_total", cache="user") == 1
    assert value(samples, "tomori_consistency_ratio", cache="user") == 0.999
    assert round(value(samples, "tomori_consistency_nines", cache="user"), 6) == 3.0
    assert value(samples, "tomori_consistency_checked_total", cache="st_preset") == 0
    assert ("tomori_consistency_ratio", (("cache", "st_preset"),)) not in samples
    assert value(samples, "tomori_consistency_repairs_total", cache="user") == 1
    assert value(samples, "tomori_consistency_repairs_total", cache="st_preset") == 0
    perfect = value(samples, "tomori_consistency_nines", cache="tomori_state")
    assert perfect == NINES_CAP  # finite, never +Inf


def test_the_worker_is_named_with_its_shards(endpoint) -> None:  # type: ignore[no-untyped-def]
    samples = scrape(endpoint(_worker()).endpoint.url)
    labels = (("shard_count", "4"), ("shards", "3"), ("worker_id", "test:1:shard3"))
    assert samples[("tomori_worker_info", labels)] == 1
    assert value(samples, "tomori_worker_start_time_seconds") == 1_700_000_000.0
    assert value(samples, "tomori_worker_ready") == 0  # never warmed, no gateway
    assert value(samples, "process_resident_memory_bytes") > 0


def test_turn_latency_is_a_histogram_per_outcome(endpoint) -> None:  # type: ignore[no-untyped-def]
    timings = TurnTimings()
    for seconds in (0.0002, 0.0002, 0.003, 7.0):
        timings.observe("ok", seconds)
    timings.observe("blacklisted", 0.0001)
    samples = scrape(
        endpoint(_worker(client=SimpleNamespace(turn_timings=timings))).endpoint.url
    )

    def bucket(le: str, outcome: str = "ok") -> float:
        return value(
            samples, "tomori_turn_duration_seconds_bucket", le=le, outcome=outcome
        )

    assert bucket("0.0001") == 0 and bucket("0.00025") == 2 and bucket("0.005") == 3
    assert bucket("2.5") == 3 and bucket("+Inf") == 4
    assert value(samples, "tomori_turn_duration_seconds_count", outcome="ok") == 4
    assert value(
        samples, "tomori_turn_duration_seconds_sum", outcome="ok"
    ) == pytest.approx(7.0034)
    assert bucket("0.0001", "blacklisted") == 1  # upper bounds are inclusive


def test_pipeline_counters_become_turn_and_message_counters(endpoint) -> None:  # type: ignore[no-untyped-def]
    counters = SimpleNamespace(
        received=9,
        skipped_own=1,
        skipped_bots=2,
        shed=1,
        dropped=3,
        errors=1,
        outcomes={"ok": 4, "dm": 1},
    )
    samples = scrape(
        endpoint(_worker(pipeline=SimpleNamespace(counters=counters))).endpoint.url
    )
    assert value(samples, "tomori_messages_received_total") == 9
    assert value(samples, "tomori_messages_skipped_total", reason="bot") == 2
    assert value(samples, "tomori_messages_skipped_total", reason="shed") == 1
    assert value(samples, "tomori_messages_skipped_total", reason="shutdown") == 3
    assert value(samples, "tomori_turns_total", outcome="ok") == 4
    assert value(samples, "tomori_turns_total", outcome="dm") == 1
    assert value(samples, "tomori_pipeline_errors_total") == 1


def test_emergency_clears_are_counted_with_what_they_cleared(
    test_cache, endpoint
) -> None:  # type: ignore[no-untyped-def]
    url = endpoint(_worker()).endpoint.url
    before = scrape(url)
    for key in range(3):
        test_cache.set(key, "x")
    clear_emergency_caches(source="prom-test", collect_before_measuring=False)
    after = scrape(url)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("tomori_emergency_clears_total", source="prom-test") == 1
    assert delta("tomori_emergency_cleared_entries_total", cache=CACHE) == 3


def test_memory_figures_include_the_guard_state_and_thresholds(endpoint) -> None:  # type: ignore[no-untyped-def]
    guard = MemoryGuard(
        limit_bytes=1000,
        warning_threshold=0.5,
        critical_threshold=0.9,
        cooldown_seconds=0,
        rss_source=lambda: 600,
    )
    guard.check()
    samples = scrape(endpoint(_worker(guard=guard)).endpoint.url)
    assert value(samples, "tomori_memory_guard_state", state="warning") == 1
    assert value(samples, "tomori_memory_guard_state", state="safe") == 0
    assert value(samples, "tomori_memory_limit_bytes") == 1000
    assert (
        value(samples, "tomori_memory_guard_threshold_ratio", state="critical") == 0.9
    )
    assert value(samples, "tomori_memory_rss_bytes") > 1_000_000  # the real process


def test_invalidation_lag_is_observed_where_the_bus_applies(
    test_cache, endpoint
) -> None:  # type: ignore[no-untyped-def]
    bus.configure(redis_url="", channel=f"tomori:test:{uuid.uuid4().hex}")
    try:
        url = endpoint(_worker()).endpoint.url
        test_cache.set(1, "x")
        bus.broadcast([(CACHE, "key", (1,))])
        samples = scrape(url)
    finally:
        bus.configure()
    assert test_cache.peek(1, None) is None
    assert value(samples, "tomori_invalidation_lag_seconds_count") == 1
    assert value(samples, "tomori_invalidation_lag_seconds_bucket", le="+Inf") == 1
    assert value(samples, "tomori_bus_local_total") == 1
    assert value(samples, "tomori_bus_connected") == 0  # not subscribed


async def test_size_estimates_come_from_the_workers_loop_side_estimator(
    test_cache, endpoint
) -> None:  # type: ignore[no-untyped-def]
    worker = _worker()
    observability = endpoint(worker, size_sample=4)
    for key in range(40):
        test_cache.set(key, f"{key:04d}" * 250)  # 1000 characters each
    series = ("tomori_cache_estimated_bytes", (("cache", CACHE),))
    assert series not in scrape(observability.endpoint.url)  # not refreshed yet
    await observability.refresh()  # the endpoint's own refresh walks no cache
    assert series not in scrape(observability.endpoint.url)
    await worker.cache_bytes.refresh()
    estimate = value(
        scrape(observability.endpoint.url), "tomori_cache_estimated_bytes", cache=CACHE
    )
    assert 40 * 1000 < estimate < 40 * 1200


def test_deep_size_counts_shared_objects_once_and_skips_classes() -> None:
    blob = b"x" * 10_000
    assert deep_size([blob, blob]) < deep_size([blob, b"y" * 10_000])
    shared = [int, len, EmergencyPolicy.CLEAR]
    assert deep_size(shared) == sys.getsizeof(shared)
    assert deep_size(list(range(100_000)), budget=1000) > 0  # bounded, still answers


def test_a_cache_without_core_maps_has_no_estimate() -> None:
    plain = SimpleNamespace(entries={1: 2}, maps=dict)  # a ManagedCache of no core map
    assert estimate_cache_bytes(plain, sample=8) is None
    empty: BoundedTTLCache[int, int] = BoundedTTLCache("e", maxsize=5)
    assert estimate_cache_bytes(empty, sample=8) == 0


def test_bucket_bounds_must_ascend() -> None:
    with pytest.raises(ValueError, match="ascending"):
        BucketCounts([0.1, 0.01])
    counts = BucketCounts([1.0])
    counts.observe(-0.5)  # clock skew: counted as 0
    assert counts.cumulative() == ([("1.0", 1), ("+Inf", 1)], 0.0)


# ----------------------------------------------------------------- probes


@pytest.fixture
def probes(
    fake_clock: FakeClock,
) -> Iterator[tuple[str, WorkerHealth, dict[str, bool]]]:
    """Serve only the probes of a `WorkerHealth` on a fake clock."""
    state = {"bus": True, "stopping": False}
    figures = LoopFigures(gateway_connected=True)
    health = WorkerHealth(
        figures=figures,
        bus_connected=lambda: state["bus"],
        stopping=lambda: state["stopping"],
        clock=fake_clock,
    )
    from prometheus_client import CollectorRegistry

    server = MetricsEndpoint(
        make_app(CollectorRegistry(), health), address="127.0.0.1", port=0
    )
    server.start()
    yield server.url, health, state
    server.stop()


def test_readiness_waits_for_the_warm_up_and_names_what_fails(probes) -> None:  # type: ignore[no-untyped-def]
    url, health, state = probes
    status, body = get(url + "/readyz")
    assert status == 503 and '"failing": ["caches_warmed"]' in body
    health.caches_warmed = True
    assert get(url + "/readyz")[0] == 200
    state["bus"] = False
    health.figures.gateway_connected = False
    status, body = get(url + "/readyz")
    assert (
        status == 503 and '"failing": ["bus_subscribed", "gateway_connected"]' in body
    )
    state["bus"], health.figures.gateway_connected = True, True
    state["stopping"] = True
    assert '"failing": ["not_stopping"]' in get(url + "/readyz")[1]


def test_a_stuck_event_loop_fails_liveness(probes, fake_clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    url, health, _ = probes
    health.caches_warmed = True
    assert get(url + "/healthz") == (200, get(url + "/healthz")[1])
    fake_clock.advance(LOOP_STALL_SECONDS + 1)
    status, body = get(url + "/healthz")
    assert status == 503 and '"status": "stalled"' in body
    assert get(url + "/readyz")[0] == 503
    health.beat()
    assert get(url + "/healthz")[0] == 200 and get(url + "/readyz")[0] == 200


def test_other_paths_are_not_found(probes) -> None:  # type: ignore[no-untyped-def]
    url, _, _ = probes
    status, body = get(url + "/admin/")
    assert status == 404 and "/metrics" in body
    assert parse(get(url + "/metrics")[1]) == {}


# ----------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("METRICS_PORT", None, None),
        ("METRICS_PORT", "", None),
        ("METRICS_PORT", "9464", 9464),
        ("METRICS_PORT", "0", 0),
        ("METRICS_ADDRESS", None, "127.0.0.1"),
        ("METRICS_ADDRESS", "0.0.0.0", "0.0.0.0"),
        ("METRICS_ADDRESS", "::", "::"),
    ],
)
def test_metrics_settings_accept(name: str, raw: str | None, expected: Any) -> None:
    assert parse_knob(KNOBS_BY_NAME[name], raw) == (expected, None)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("METRICS_PORT", "70000"),
        ("METRICS_PORT", "-1"),
        ("METRICS_PORT", "http"),
        ("METRICS_ADDRESS", "localhost"),
        ("METRICS_ADDRESS", "127.0.0.1:9464"),
        ("METRICS_REFRESH_SECONDS", "0"),
        ("HEALTH_MIN_LIVE_WORKERS", "-1"),
    ],
)
def test_metrics_settings_refuse_naming_the_variable(name: str, raw: str) -> None:
    _, error = parse_knob(KNOBS_BY_NAME[name], raw)
    assert error is not None and error.startswith(f"{name}={raw!r} is invalid")
