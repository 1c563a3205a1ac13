"""The cache metrics logger: both sinks, the host row, cadence through a DB outage."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from caches.core import BoundedTTLCache, FakeClock
from caches.memory.readers import HostMemorySampler
from caches.registry import EmergencyPolicy
from metrics.logger import BackgroundMetricWriter, CacheMetricsLogger, LoopLagMonitor
from metrics.models import MetricSample
from metrics.repository import MetricSampleRepository
from metrics.snapshot import build_cache_sizes_snapshot

HOST = Path(__file__).parents[2] / "caches" / "memory" / "fixtures" / "hosts" / "normal"
INTERVAL = 300.0


def _ticker(clock: FakeClock, stop: asyncio.Event, *, ticks: int) -> Any:
    """Return a wait function that advances the clock and stops after ``ticks``."""
    waits: list[float] = []

    async def wait(_stop: asyncio.Event, seconds: float) -> None:
        waits.append(seconds)
        if len(waits) >= ticks:
            stop.set()
            return
        clock.advance(seconds)

    wait.waits = waits  # type: ignore[attr-defined]
    return wait


def logger_for(**options: Any) -> CacheMetricsLogger:
    """Return a logger of worker "w1" sampling every INTERVAL, with `options`."""
    return CacheMetricsLogger(interval_seconds=INTERVAL, worker_id="w1", **options)


@pytest.fixture
def user_cache(isolated_registry: Any) -> BoundedTTLCache:
    cache: BoundedTTLCache = BoundedTTLCache("user", maxsize=100)
    for index in range(7):
        cache.set(index, index)
    isolated_registry.register("user", cache, policy=EmergencyPolicy.CLEAR)
    return cache


async def test_first_sample_is_taken_at_start(
    user_cache: BoundedTTLCache, metric_lines: Any, metric_rows: Any
):
    clock, stop = FakeClock(), asyncio.Event()
    wait = _ticker(clock, stop, ticks=1)
    logger = logger_for(clock=clock, wait=wait, startup_period_seconds=0)
    await logger.run(stop)
    (line,) = metric_lines.named("cache_sizes")
    assert line["user"] == 7 and line["worker_id"] == "w1"
    assert wait.waits == [INTERVAL]
    assert metric_rows.writer.flush(timeout=10)
    assert metric_rows.named("cache_sizes")[0]["user"] == 7


async def test_host_memory_is_a_row_without_a_log_twin(
    user_cache: BoundedTTLCache, metric_lines: Any, metric_rows: Any
):
    clock, stop = FakeClock(), asyncio.Event()
    logger = logger_for(
        host_sampler=HostMemorySampler(proc_root=HOST / "proc", sys_root=HOST / "sys"),
        clock=clock,
        wait=_ticker(clock, stop, ticks=3),
    )
    await logger.run(stop)
    assert metric_rows.writer.flush(timeout=10)
    assert len(metric_rows.named("cache_sizes")) == 3
    host = metric_rows.named("host_memory")
    assert len(host) == 3 and host[0]["mem_total_mb"] > 0
    assert host[0]["worker_id"] == "w1"
    assert metric_lines.named("host_memory") == []
    assert len(metric_lines.named("cache_sizes")) == 3


class RaisingRepository:
    """A database that is down: every insert fails."""

    def __init__(self) -> None:
        self.attempts = 0

    def record_sample(self, name: str, fields: dict[str, Any]) -> bool:
        self.attempts += 1
        raise OSError("connection refused")


class HangingRepository:
    """A database that hangs: every insert blocks until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def record_sample(self, name: str, fields: dict[str, Any]) -> bool:
        self.started.set()
        self.release.wait(timeout=30)
        return False


@pytest.mark.parametrize("repository_class", [RaisingRepository, HangingRepository])
async def test_logger_keeps_its_cadence_while_the_database_is_down(
    repository_class: type, user_cache: BoundedTTLCache, metric_lines: Any
):
    repository = repository_class()
    hangs = isinstance(repository, HangingRepository)
    max_pending = 2 if hangs else 16
    writer = BackgroundMetricWriter(repository, max_pending=max_pending)  # type: ignore[arg-type]
    clock, stop = FakeClock(), asyncio.Event()
    wait = _ticker(clock, stop, ticks=6)
    logger = logger_for(writer=writer, clock=clock, wait=wait, startup_period_seconds=0)
    try:
        async with asyncio.timeout(10):  # an insert awaited on the loop would hang
            await logger.run(stop)
    finally:
        if hangs:
            repository.release.set()
    assert logger.ticks == 6 and wait.waits == [INTERVAL] * 6
    assert len(metric_lines.named("cache_sizes")) == 6
    assert writer.flush(timeout=10)
    if hangs:
        assert writer.dropped >= 3  # bounded backlog, never an unbounded queue
    else:
        assert repository.attempts == 6
    writer.close(timeout=10)


async def test_a_failing_snapshot_does_not_end_the_series(
    user_cache: BoundedTTLCache, metric_lines: Any
):
    clock, stop = FakeClock(), asyncio.Event()
    calls = 0

    def flaky_client() -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("client not built yet")
        return None

    logger = logger_for(
        client_getter=flaky_client, clock=clock, wait=_ticker(clock, stop, ticks=3)
    )
    await logger.run(stop)
    assert logger.ticks == 3 and len(metric_lines.named("cache_sizes")) == 2


async def test_a_stall_skips_missed_ticks_instead_of_bursting(
    user_cache: BoundedTTLCache,
):
    clock, stop = FakeClock(), asyncio.Event()
    waits: list[float] = []

    async def wait(_stop: asyncio.Event, seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds + (1000 if len(waits) == 1 else 0))
        if len(waits) == 3:
            stop.set()

    logger = logger_for(clock=clock, wait=wait, startup_period_seconds=0)
    await logger.run(stop)
    assert waits == [INTERVAL, INTERVAL, INTERVAL]


async def test_start_up_samples_come_every_15_s_for_five_minutes(
    user_cache: BoundedTTLCache, metric_lines: Any
):
    clock, stop = FakeClock(), asyncio.Event()
    wait = _ticker(clock, stop, ticks=24)
    logger = logger_for(clock=clock, wait=wait)
    await logger.run(stop)
    # Samples at 0, 15, ..., 285 s, then 300 s: the interval from there on.
    assert wait.waits == [15.0] * 20 + [INTERVAL] * 4
    assert len(metric_lines.named("cache_sizes")) == 24


async def test_start_up_never_samples_slower_than_a_short_interval(
    user_cache: BoundedTTLCache,
):
    clock, stop = FakeClock(), asyncio.Event()
    wait = _ticker(clock, stop, ticks=3)
    logger = CacheMetricsLogger(
        interval_seconds=5.0, worker_id="w1", clock=clock, wait=wait
    )
    await logger.run(stop)
    assert wait.waits == [5.0, 5.0, 5.0]


@pytest.mark.django_db(transaction=True)
def test_samples_land_as_metric_sample_rows(user_cache: BoundedTTLCache):
    # A sync test running its own loop: the ORM reads below stay on this thread.
    clock, stop = FakeClock(), asyncio.Event()
    logger = CacheMetricsLogger(
        interval_seconds=INTERVAL,
        worker_id="w7",
        repository=MetricSampleRepository(),
        host_sampler=HostMemorySampler(proc_root=HOST / "proc", sys_root=HOST / "sys"),
        clock=clock,
        wait=_ticker(clock, stop, ticks=2),
    )
    asyncio.run(logger.run(stop))
    assert logger.writer.flush(timeout=10)
    rows = list(MetricSample.objects.order_by("id"))
    assert [row.metric_name for row in rows] == [
        "cache_sizes",
        "host_memory",
        "cache_sizes",
        "host_memory",
    ]
    assert rows[0].fields["user"] == 7 and rows[0].fields["worker_id"] == "w7"
    assert rows[1].fields["mem_available_mb"] > 0


async def test_snapshot_reports_caches_discord_memory_and_lag(
    client: Any, sim: Any, user_cache: BoundedTTLCache
):
    from caches.memory.guard import MemoryGuard

    guard = MemoryGuard(
        limit_bytes=8 * 1024**3,
        warning_threshold=0.75,
        critical_threshold=0.85,
        cooldown_seconds=60,
    )
    snapshot = build_cache_sizes_snapshot(
        client=client, guard=guard, worker_id="w1", loop_lag=12.5
    )
    totals = sim.world.totals()
    assert snapshot["user"] == 7 and snapshot["cache_entries_total"] == 7
    assert snapshot["discord_members"] == totals["members"]
    assert snapshot["discord_presences"] == totals["presences"]
    assert snapshot["rss_mb"] > 0 and snapshot["memory_limit_mb"] == 8192.0
    assert 0 < snapshot["memory_percent"] < 100
    assert snapshot["memory_state"] == "safe"
    assert snapshot["python_allocated_blocks"] > 0
    assert snapshot["loop_lag_peak_ms"] == 12.5
    assert snapshot["worker_id"] == "w1" and snapshot["shard_count"] is None


def test_snapshot_without_guard_uses_the_detected_limit(user_cache: BoundedTTLCache):
    snapshot = build_cache_sizes_snapshot(worker_id="w1")
    assert snapshot["memory_limit_mb"] > 0 and snapshot["memory_limit_source"]
    assert "discord_members" not in snapshot


async def test_loop_lag_monitor_reports_the_peak_since_last_read():
    clock = FakeClock(10.0)
    monitor = LoopLagMonitor(interval_seconds=0.0, clock=clock)
    monitor.start()
    clock.advance(0.25)  # the loop is "blocked" for 250 ms before the tick runs
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert monitor.take_peak_ms() == 250.0
    await asyncio.sleep(0)
    assert monitor.take_peak_ms() == 0.0  # reset by the read
    monitor.stop()
    assert monitor.take_peak_ms() is None


async def test_logger_reports_loop_lag_from_its_monitor(
    user_cache: BoundedTTLCache, metric_lines: Any
):
    clock, stop = FakeClock(), asyncio.Event()
    monitor = LoopLagMonitor(interval_seconds=1000.0, clock=clock)
    monitor.start()
    clock.advance(1000.04)  # overdue now: a stuck loop still shows as lag
    logger = logger_for(
        clock=clock, lag_monitor=monitor, wait=_ticker(clock, stop, ticks=1)
    )
    await logger.run(stop)
    monitor.stop()
    (line,) = metric_lines.named("cache_sizes")
    assert line["loop_lag_peak_ms"] == pytest.approx(40.0, abs=0.01)


def test_the_row_reads_the_same_worker_snapshot_the_dashboard_shows(
    user_cache: BoundedTTLCache, metric_lines: Any
):
    from caches.operations import WorkerContext, build_worker_snapshot, worker_view

    context = WorkerContext(worker_id="w1", shard_ids=[3])
    taken = []

    def snapshot() -> Any:
        taken.append(build_worker_snapshot(context=context, started_at=0.0))
        return taken[-1]

    logger = logger_for(snapshot=snapshot)
    row = logger.sample()
    [view] = [worker_view(snap) for snap in taken]
    sizes = {layer.name: layer.size for layer in view.layers}
    assert row["user"] == sizes["user"] == 7
    assert row["cache_entries_total"] == sum(sizes.values())
    assert row["rss_mb"] == view.memory["rss_mb"]
    assert row["memory_limit_mb"] == view.memory["limit_mb"]
    assert row["memory_limit_source"] == view.memory["limit_source"]
    assert row["memory_percent"] == view.memory["percent"]
    assert row["shard_ids"] == view.shard_ids == [3]
    assert metric_lines.named("cache_sizes")[0]["user"] == 7


@pytest.mark.django_db(transaction=True)
def test_the_workers_cache_sizes_row_carries_each_caches_bytes_without_metrics_port(
    user_cache: BoundedTTLCache, db_metric_writer: BackgroundMetricWriter, settings: Any
):
    from caches.operations import WorkerContext
    from tomori.bot.worker import BotWorker, WorkerOptions

    settings.METRICS_PORT = None  # no endpoint: the worker estimates by itself
    worker = BotWorker(WorkerOptions(worker_id="w-bytes"))
    worker.context = WorkerContext(worker_id="w-bytes")
    assert worker.cache_metrics_logger().sample()["bytes_estimate"] == {}
    estimates = asyncio.run(worker.cache_bytes.refresh())  # its loop-side timer's step
    worker.cache_metrics_logger().sample()
    assert db_metric_writer.flush(timeout=10)
    rows = MetricSample.objects.filter(
        metric_name="cache_sizes", fields__worker_id="w-bytes"
    ).order_by("id")
    first, second = (row.fields for row in rows)
    assert first["bytes_estimate"] == {} and first["user"] == 7
    assert second["bytes_estimate"] == estimates and estimates["user"] > 0
