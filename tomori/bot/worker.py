"""The bot worker: start-up in the documented order, the timers, and a clean shutdown.

Start-up order (settings were validated by the command's system checks):
0. the metrics endpoint with its probes, when METRICS_PORT is set (not ready
   until the caches are warmed and the gateway is connected);
1. libvips limits, before any image work (they configure one shared instance);
2. subscribe to the bus (invalidations and operator commands) — before
   warming, so no invalidation committed during the warm-up is missed;
3. warm the LLM cache, the catalogs (stored snapshots first, network later),
   the preset avatars, then the per-server entries of the shards' guilds
   (`caches.warm`: a few queries per table, within WORKER_WARM_TIMEOUT_SECONDS;
   a slow or failing database leaves the worker to start cold), kept warm
   after by a refresh of what is still resident every half TTL
   (WORKER_REFRESH_AHEAD);
4. start the timers: memory guard, cache metrics logger, discord.py sweepers,
   catalog stale check, live snapshot, heap trim (caches/memory/heap_trim.py);
5. log in (to Discord, or to the built-in simulated Discord).
Before all that it takes the shard lock and keeps renewing it (tomori/bot/lock/);
a lock that may no longer be ours stops the worker with exit code 1.
SIGTERM/SIGINT closes the pipeline's intake at once (no turn starts after;
the waiting messages are dropped, one line counts them), closes the gateway,
lets the running turns finish (then cancels those left: a turn's short-term
memory is stored whole or not at all), closes the HTTP session once no reply
can use it, stops the timers and the bus, and stores the durable
short-term-memory writes of every turn that ran, retrying until
WORKER_SHUTDOWN_TIMEOUT_SECONDS after the signal: exit 0 when all are
stored, else 1 with a log line counting what was not. A watchdog ends the
process soon after that deadline whatever still runs, and threads blocked
in a hung database never hold it (`exit_if_blocked_in_database`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from caches import bus, live
from caches.catalogs.catalog_set import CatalogSet
from caches.catalogs.service import (
    build_catalog_set,
    load_stored_snapshots,
    register_catalogs,
    store_snapshot,
)
from caches.consistency import ConsistencyWatcher
from caches.core.loop import on_loop_thread, run_on_loop
from caches.core.periodic import run_periodically, wait_or_stop
from caches.database import database_calls
from caches.db_outage import DB_ERRORS, check_database
from caches.discord_caches import run_discord_sweepers
from caches.memory.emergency import install_emergency_handler
from caches.memory.guard import MemoryGuard, run_memory_monitor, set_current_guard
from caches.memory.heap_trim import HEAP_TRIM_SECONDS, set_mmap_threshold, trim_heap
from caches.memory.readers import (
    HostMemorySampler,
    detect_memory_limit_bytes,
    read_rss_bytes,
)
from caches.memory.vips import apply_libvips_settings
from caches.messages import TrafficFigures, WorkerSnapshot
from caches.operations.snapshot import build_worker_snapshot
from caches.operations.worker import WorkerContext, make_command_handler
from caches.registry import registry
from caches.warm import REFRESH_CHECK_SECONDS, RefreshSchedule
from metrics.cache_bytes import CacheBytesEstimator
from metrics.logger import CacheMetricsLogger, LoopLagMonitor, emit_metric
from metrics.prometheus.buckets import TURN_BUCKETS
from metrics.prometheus.worker import WorkerObservability, observability_from_settings
from metrics.traffic import TrafficWindow, merged_counts
from tomori.bot.durable_flush import SHUTDOWN_MARGIN_SECONDS, DurableFlush
from tomori.bot.lock import ShardLock, lock_names
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

#: How often the database outage check runs (a timer, like the ones below):
#: outage summaries are written and, during an outage, the database pinged.
DB_CHECK_SECONDS = 1.0
#: How often short-term memory's stored-keys filter is checked (built if
#: missing, as at start or after a failed build; rebuilt when full).
STORED_KEYS_CHECK_SECONDS = 60.0

CATALOG_CHECK_SECONDS = 60.0
#: How often the console gets one line summing up the traffic.
TRAFFIC_SUMMARY_SECONDS = 60.0


def traffic_line(window: dict[str, Any], hits: int, misses: int) -> str:
    """Return one console line for a traffic window (turns, outcomes, latency, hits)."""
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(window["outcomes"].items()))
    lookups = hits + misses
    rate = f"{100 * hits / lookups:.1f}%" if lookups else "n/a"
    p50, p99 = window["p50_ms"], window["p99_ms"]
    latency = "n/a" if p50 is None else f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    return (
        f"{window['turns']} turn(s) in the last minute ({outcomes or 'none'}); "
        f"latency {latency}; cache hit rate {rate}"
    )


#: Exit code when durable writes could not be stored before the deadline.
EXIT_UNFLUSHED = 1
#: The longest one shutdown step (a cleanup) is waited for.
SHUTDOWN_STEP_SECONDS = 5.0
#: The watchdog ends the process this long after the shutdown deadline.
WATCHDOG_GRACE_SECONDS = 3.0
#: The share of the shutdown budget (less the flush's margin) the running
#: turns get to finish, counted from the signal and at most
#: SHUTDOWN_STEP_SECONDS; the rest is the durable flush's, after the last turn.
TURNS_SHARE = 0.5


def turns_budget(timeout: float) -> float:
    """Return how long after the signal the running turns may run on (see TURNS_SHARE)."""
    return min(SHUTDOWN_STEP_SECONDS, (timeout - SHUTDOWN_MARGIN_SECONDS) * TURNS_SHARE)


@dataclass
class WorkerOptions:
    """What `runbot` was asked to do."""

    token: str = ""
    simulate: bool = True
    scenario: str = "small"
    shard_ids: list[int] | None = None
    shard_count: int | None = None
    duration: float | None = None
    serve_admin: bool = False
    admin_host: str = "127.0.0.1"
    admin_port: int = 8000
    traffic_rate: float | None = None
    fake_openrouter: bool = False
    worker_id: str = ""
    wait_for_lock: bool = False
    #: A simulated Discord served by another process (`python -m
    #: tomori.bot.simulator`): its http://host:port; empty: the built-in one.
    simulator_url: str = ""

    def resolved_worker_id(self) -> str:
        """Return the id this worker reports under (host:pid[:shards])."""
        if self.worker_id:
            return self.worker_id
        base = settings.TOMORI_WORKER_ID or f"{socket.gethostname()}:{os.getpid()}"
        if self.shard_ids:
            base += ":shard" + "-".join(map(str, self.shard_ids))
        return base


@dataclass
class _Running:
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    cleanups: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)


class BotWorker:
    """One bot worker process (one shard set): caches, client, timers."""

    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.worker_id = options.resolved_worker_id()
        self.stop_event = asyncio.Event()
        self.started_at = time.time()
        self.client: Any = None
        self.pipeline: Any = None
        self.simulator: Any = None
        self.catalogs: CatalogSet | None = None
        self.guard: MemoryGuard | None = None
        self.cache_bytes = CacheBytesEstimator(
            registry, sample=knobs().METRICS_SIZE_SAMPLE_ENTRIES
        )
        self._last_hits = (0, 0)
        self.traffic = TrafficWindow(TURN_BUCKETS)
        self.consistency = ConsistencyWatcher(
            registry,
            checks_per_second=knobs().CONSISTENCY_CHECKS_PER_SECOND,
            bound_seconds=knobs().INVALIDATION_STALENESS_BOUND_SECONDS,
        )
        self.context: WorkerContext | None = None
        self._publishing: set[asyncio.Task[None]] = set()  # held until done
        self.admin_port: int | None = None
        self.observability: WorkerObservability | None = None
        self._lock = ShardLock(lock_names(options.shard_ids), owner=self.worker_id)
        self.exit_reason = ""  # why run() returned non-zero
        self._running = _Running()
        self._watchdog: threading.Timer | None = None
        self.ready = asyncio.Event()
        #: Refresh-ahead (WORKER_REFRESH_AHEAD): each name counts from its warm-up.
        self.refresh = RefreshSchedule({})

    async def run(self, *, on_locked: Callable[[], object] | None = None) -> int:
        """Run until stopped (signal, --duration or `stop()`); return the exit code.

        `on_locked` runs once the shard lock is ours (the embedded admin starts
        there, so a second process reports the held shard, not a busy port).
        """
        self._install_signal_handlers()
        if not await self._lock.take(
            wait=self.options.wait_for_lock, stop=self.stop_event
        ):
            return 0  # stopped while waiting for the lock
        code = EXIT_UNFLUSHED
        try:
            self._spawn(self._keep_lock(), "shard-lock")
            if on_locked is not None:
                on_locked()
            await self.start()
            await self._wait_until_done()
        finally:
            code = await self.shutdown()
        return 1 if self.exit_reason else code

    def stop(self) -> None:
        """Ask the worker to shut down; no turn starts from now on."""
        self.stop_event.set()
        if self.pipeline is not None:
            self.pipeline.close_intake()

    async def start(self) -> None:
        """Bring the worker up in the documented order."""
        if not self._start_metrics():
            return
        effective = apply_libvips_settings(
            concurrency=knobs().SHARP_CONCURRENCY,
            cache_memory_mb=knobs().SHARP_CACHE_MEMORY_MB,
            cache_items=knobs().SHARP_CACHE_ITEMS,
            cache_files=knobs().SHARP_CACHE_FILES,
        )
        logger.info("libvips limits in effect: %s", effective)
        threshold_kb = knobs().HEAP_MMAP_THRESHOLD_KB
        if set_mmap_threshold(threshold_kb * 1024):
            logger.info("heap: glibc's mmap threshold fixed at %d KiB", threshold_kb)
        # Subscribe before warming: the first subscription clears every
        # invalidatable cache, and a write committed while warming must not
        # be missed.
        self._subscribe()
        await self._warm_caches()
        if self.observability is not None:
            self.observability.caches_warmed()
        assert self.context is not None
        self.context.catalogs = self.catalogs
        self._start_timers()
        if not await self._lock_handed_over():
            return
        await self._log_in()
        self.ready.set()
        logger.info("worker %s is up", self.worker_id)

    def _start_metrics(self) -> bool:
        """Serve /metrics, /healthz and /readyz when METRICS_PORT is set; False if it cannot."""
        observability = observability_from_settings(self)
        if observability is None:
            return True
        try:
            observability.start()
        except OSError as exc:
            self.exit_reason = (
                f"cannot serve metrics on {knobs().METRICS_ADDRESS}:"
                f"{knobs().METRICS_PORT} (METRICS_ADDRESS/METRICS_PORT): {exc}"
            )
            logger.error("%s", self.exit_reason)
            self.stop()
            return False
        self.observability = observability
        self._running.cleanups.append(observability.stop)
        self._spawn(observability.run(self.stop_event), "metrics-endpoint")
        return True

    async def _warm_caches(self) -> None:
        from caches.layers import ensure_registry, load_all
        from caches.layers.llm import initialize_llm_cache
        from caches.layers.preset_avatar import (
            count_valid_avatars,
            initialize_preset_avatar_cache,
        )

        load_all()  # strict: a layer that cannot be imported stops the worker
        ensure_registry()  # AppConfig.ready() built it; a bare worker builds it here
        if not await initialize_llm_cache():
            logger.warning(
                "LLM cache not warmed (database unavailable?); retried on use"
            )
        await self._start_catalogs()
        try:
            count = await initialize_preset_avatar_cache()
            logger.info(
                "preset avatars warmed: %d (%d with a valid PNG)",
                count,
                count_valid_avatars(),
            )
        except Exception as exc:  # noqa: BLE001 (re-warmed lazily)
            logger.warning("preset avatars not warmed: %s", exc)
        await self._warm_guilds()

    async def _warm_guilds(self) -> None:
        """Warm the shards' guilds' per-server entries, within its deadline (one line)."""
        from caches.warm import warm_guilds, warmed_layers

        timeout = knobs().WORKER_WARM_TIMEOUT_SECONDS
        if not timeout:
            logger.info("guild caches not warmed (WORKER_WARM_TIMEOUT_SECONDS=0)")
            return
        before = read_rss_bytes() or 0
        report = await warm_guilds(
            shard_ids=self.options.shard_ids,
            shard_count=self.options.shard_count,
            timeout=timeout,
        )
        grown = ((read_rss_bytes() or 0) - before) / 2**20
        log = logger.warning if report.stopped else logger.info
        log("guild caches: %s (RSS %+.1f MB)", report.line(), grown)
        if knobs().WORKER_REFRESH_AHEAD:
            self.refresh = RefreshSchedule.for_layers(warmed_layers())
            self.refresh.start()

    async def _start_catalogs(self) -> None:
        overrides: dict[str, Any] = {}
        if self.options.fake_openrouter:
            overrides["base_url"] = await self._start_fake_openrouter()
        self.catalogs = build_catalog_set(on_refreshed=store_snapshot, **overrides)
        register_catalogs(self.catalogs, loop=asyncio.get_running_loop())
        loaded = await load_stored_snapshots(self.catalogs)
        logger.info("catalog snapshots loaded: %s", loaded or "none stored")
        self._running.cleanups.append(self.catalogs.aclose)
        if not self.catalogs.text.is_ready():
            self._spawn(self.catalogs.warm(), "catalog-warm")

    async def _start_fake_openrouter(self) -> str:
        from caches.catalogs.fake_server import FakeOpenRouter
        from caches.catalogs.samples import sample_catalogs

        fake = FakeOpenRouter(catalogs=sample_catalogs())
        base_url = await fake.start()
        self._running.cleanups.append(fake.stop)
        return base_url

    def _subscribe(self) -> None:
        loop = asyncio.get_running_loop()
        self.context = WorkerContext(
            worker_id=self.worker_id,
            shard_ids=self.options.shard_ids,
            loop=loop,
        )
        bus.start_subscriber(loop=loop, follow_outbox=True)
        bus.set_command_handler(
            make_command_handler(self.context, after=self.publish_snapshot)
        )
        self._running.cleanups.append(self._close_bus)

    async def _close_bus(self) -> None:
        bus.set_command_handler(None)
        await asyncio.to_thread(bus.stop)

    def _start_timers(self) -> None:
        limit, source = detect_memory_limit_bytes(
            configured_mb=knobs().CONTAINER_MEMORY_LIMIT_MB
        )
        logger.info("memory limit %.0f MB (%s)", limit / 2**20, source)
        if limit > 0:
            self.guard = MemoryGuard(
                limit_bytes=limit,
                warning_threshold=knobs().MEMORY_WARNING_THRESHOLD,
                critical_threshold=knobs().MEMORY_CRITICAL_THRESHOLD,
                cooldown_seconds=knobs().EMERGENCY_COOLDOWN_MS / 1000,
                on_metric=emit_metric,
            )
            install_emergency_handler(self.guard, client_getter=lambda: self.client)
            set_current_guard(self.guard)
            self._spawn(
                run_memory_monitor(
                    self.guard,
                    interval_seconds=knobs().MEMORY_MONITOR_INTERVAL_MS / 1000,
                    stop=self.stop_event,
                ),
                "memory-guard",
            )
        lag = LoopLagMonitor()
        lag.start()
        self._running.cleanups.append(lag.stop)
        self._spawn(
            self.cache_bytes.run(
                self.stop_event,
                interval_seconds=knobs().METRICS_REFRESH_SECONDS,
            ),
            "cache-bytes",
        )
        metrics_logger = self.cache_metrics_logger(lag_monitor=lag)
        self._spawn(metrics_logger.run(self.stop_event), "cache-metrics")
        self._spawn(self._every(DB_CHECK_SECONDS, check_database), "db-outage")
        self._spawn(
            self._every(TRAFFIC_SUMMARY_SECONDS, self._log_traffic, first_after=True),
            "traffic-summary",
        )
        self._spawn(
            self._every(CATALOG_CHECK_SECONDS, self._check_catalogs), "catalogs"
        )
        self._spawn(self.consistency.run(self.stop_event), "consistency-watcher")
        self._spawn(
            self._every(HEAP_TRIM_SECONDS, self._trim_heap, first_after=True),
            "heap-trim",
        )
        self._spawn(
            self._every(knobs().WORKER_SNAPSHOT_INTERVAL_SECONDS, self._publish_async),
            "live-snapshot",
        )
        self._spawn(
            self._every(STORED_KEYS_CHECK_SECONDS, self._maintain_stored_keys),
            "stm-stored-keys",
        )
        if knobs().WORKER_REFRESH_AHEAD:
            self._spawn(
                self._every(
                    REFRESH_CHECK_SECONDS, self._refresh_caches, first_after=True
                ),
                "refresh-ahead",
            )

    async def _refresh_caches(self) -> None:
        """Reload in bulk a slice of the warmed entries still held (`caches.warm`)."""
        from caches.layers.user import refresh_users
        from caches.warm import USERS, refresh_guilds

        due = self.refresh.tick()
        users = due.pop(USERS, None)
        if due:
            report = await refresh_guilds(
                due,
                shard_ids=self.options.shard_ids,
                shard_count=self.options.shard_count,
            )
            if report.stopped:
                logger.warning(
                    "guild caches: a refresh stopped (%s) after %d entries: the "
                    "rest of its slice expires and reloads on use",
                    report.stopped,
                    report.stored,
                )
            else:
                logger.debug(
                    "guild caches: refreshed %d entries in %.2f s (%s)",
                    report.stored,
                    report.seconds,
                    ", ".join(
                        f"{name} {part + 1}/{n}" for name, (part, n) in due.items()
                    ),
                )
        if users is not None:
            try:
                refreshed = await refresh_users(*users)
            except DB_ERRORS as exc:
                logger.warning("users not refreshed (%s)", type(exc).__name__)
                return
            logger.debug("users refreshed: %d entries", refreshed)

    async def _maintain_stored_keys(self) -> None:
        """Keep short-term memory's stored-keys filter built (see its module)."""
        from caches.layers.short_term_memory import short_term_memory_store

        options = self.options
        shards = None
        if options.shard_ids is not None and options.shard_count is not None:
            shards = (tuple(options.shard_ids), options.shard_count)
        store = short_term_memory_store()
        started = time.monotonic()
        try:
            built = await store.maintain_stored_keys(shards=shards)
        except DB_ERRORS as exc:
            logger.warning(
                "short-term memory: stored-keys filter not built (%s); every "
                "miss reads the table until it is",
                type(exc).__name__,
            )
            return
        if built:
            logger.info(
                "short-term memory: stored-keys filter built from %d rows in "
                "%.2f s (%d KiB)",
                store.stored.built_from,
                time.monotonic() - started,
                store.stats()["stored_keys_bytes"] // 1024,
            )

    def cache_metrics_logger(
        self, *, lag_monitor: LoopLagMonitor | None = None
    ) -> CacheMetricsLogger:
        """Return the logger of this worker's cache_sizes rows (with each cache's bytes)."""
        return CacheMetricsLogger(
            interval_seconds=knobs().CACHE_METRICS_INTERVAL_MS / 1000,
            worker_id=self.worker_id,
            client_getter=lambda: self.client,
            guard=self.guard,
            snapshot=self._take_snapshot,
            host_sampler=HostMemorySampler(),
            lag_monitor=lag_monitor,
        )

    async def _log_traffic(self) -> None:
        if self.pipeline is None:
            return
        window = self.pipeline.recent.take_window()
        hits, misses = self._hits_and_misses()
        logger.info("traffic: %s", traffic_line(window, hits, misses))

    def _hits_and_misses(self) -> tuple[int, int]:
        stats = registry.stats().values()
        hits = sum(int(s.get("hits") or 0) for s in stats)
        misses = sum(int(s.get("misses") or 0) for s in stats)
        delta = (hits - self._last_hits[0], misses - self._last_hits[1])
        self._last_hits = (hits, misses)
        return delta

    async def _trim_heap(self) -> None:
        # In a thread: the loop runs on while malloc_trim walks the heap.
        await asyncio.to_thread(trim_heap)

    async def _check_catalogs(self) -> None:
        if self.catalogs is None:
            return
        await load_stored_snapshots(self.catalogs)
        await self.catalogs.refresh_stale()

    async def _keep_lock(self) -> None:
        while not self.stop_event.is_set():
            verdict = await asyncio.to_thread(self._lock.keep)
            if not verdict.serving:
                await self._lose_lock(verdict.reason)
                return
            await wait_or_stop(self.stop_event, verdict.next_in)

    async def _lose_lock(self, reason: str) -> None:
        # Another gateway session may serve the shard now: close ours first.
        logger.error("%s; stopping worker %s", reason, self.worker_id)
        self.exit_reason = reason
        try:
            await asyncio.wait_for(self._close_client(), 5)
            logger.error("gateway closed: the shard lock is lost")
        except Exception:  # noqa: BLE001 (shutdown closes it again)
            logger.exception("closing the gateway failed")
        self.stop()

    async def _lock_handed_over(self) -> bool:
        """Wait until a previous holder that lost the key must have noticed."""
        delay = self._lock.connect_at - self._lock.clock()
        if delay > 0 and not self.stop_event.is_set():
            logger.info("connecting in %.1fs, once any previous holder has left", delay)
            await wait_or_stop(self.stop_event, delay)
        return not self.stop_event.is_set()

    async def _publish_async(self) -> None:
        # Built here, on the loop that owns the caches and discord.py's state;
        # only the Redis write goes to a thread.
        snapshot = self._build_snapshot()
        if snapshot is not None:
            await asyncio.to_thread(live.publish_snapshot, self.worker_id, snapshot)

    def publish_snapshot(self) -> None:
        """Publish the live snapshot now, from any thread (after an operator command)."""
        loop = self.context.loop if self.context is not None else None
        if loop is None or not loop.is_running():
            return
        if on_loop_thread(loop):  # it runs as soon as we yield
            self._publishing.add(task := loop.create_task(self._publish_async()))
            task.add_done_callback(self._publishing.discard)
            return
        try:
            run_on_loop(loop, self._publish_async, timeout=5)
        except Exception:  # noqa: BLE001 (the command's reply matters more)
            logger.exception("could not republish the live snapshot")

    def _build_snapshot(self) -> WorkerSnapshot | None:
        if self.context is None:
            return None
        try:
            return self._take_snapshot()
        except Exception:  # noqa: BLE001 (a dashboard feed must not stop the bot)
            logger.exception("could not build the live snapshot")
            return None

    def _take_snapshot(self) -> WorkerSnapshot:
        """Return this worker's snapshot: the dashboard's and the cache_sizes row's."""
        if self.context is None:
            raise RuntimeError("the worker has not subscribed yet")
        snapshot = build_worker_snapshot(
            context=self.context,
            started_at=self.started_at,
            guard=self.guard,
            bus_status=bus.stats(),
        )
        if self.pipeline is not None:
            snapshot = dataclasses.replace(
                snapshot,
                turns=self.pipeline.counters.as_dict(),
                recent_turns=tuple(self.pipeline.recent.as_list()),
                traffic=self._traffic(self.pipeline),
            )
        snapshot = dataclasses.replace(
            snapshot, consistency=self.consistency.summary(), **self._readiness()
        )
        return self._add_bytes_estimates(snapshot)

    def _traffic(self, pipeline: Any) -> TrafficFigures:
        """Return the last minute's messages per second and turn p99 (see metrics.traffic)."""
        timings = getattr(self.client, "turn_timings", None)
        histograms = () if timings is None else timings.by_outcome.values()
        buckets = merged_counts(histograms, len(TURN_BUCKETS) + 1)
        return self.traffic.sample(messages=pipeline.counters.received, buckets=buckets)

    def _readiness(self) -> dict[str, Any]:
        """Return the readiness probe's verdict for the snapshot ({}: no probes served)."""
        if self.observability is None:
            return {}
        ready, body = self.observability.health.readiness()
        return {"ready": ready, "not_ready": tuple(body["failing"])}

    def _add_bytes_estimates(self, snapshot: WorkerSnapshot) -> WorkerSnapshot:
        # Sampled on the loop by the worker's own estimator (metrics/cache_bytes.py).
        estimates = self.cache_bytes.estimates
        caches = {
            name: dataclasses.replace(stats, bytes_estimate=estimates[name])
            if name in estimates
            else stats
            for name, stats in snapshot.caches.items()
        }
        return dataclasses.replace(snapshot, caches=caches)

    async def _log_in(self) -> None:
        from tomori.bot.client import build_client, skip_identify_wait
        from tomori.bot.pipeline import MessagePipeline
        from tomori.bot.pipeline.responder import ReplyingResponder

        if self.options.simulate:
            await self._start_simulator()
        self.pipeline = MessagePipeline(catalogs=self.catalogs)
        self.client = build_client(
            pipeline=self.pipeline,
            shard_ids=self.options.shard_ids,
            shard_count=self.options.shard_count,
            # The simulator has no IDENTIFY rate limit to wait for.
            before_identify_hook=skip_identify_wait if self.options.simulate else None,
        )
        self.pipeline.responder = ReplyingResponder(self.client)
        assert self.context is not None
        self.context.client = self.client
        token = "simulated-token" if self.options.simulate else self.options.token
        self._spawn(self.client.start(token), "discord-client")
        self._spawn(
            run_discord_sweepers(self.client, stop=self.stop_event), "discord-sweepers"
        )
        self._running.cleanups.append(self._close_client)
        if self.simulator is not None:
            self._spawn(self._drive_traffic(), "simulated-traffic")
        self._spawn(self._freeze_start_up(), "gc-freeze")
        self._spawn(self._warm_users(), "user-warm")

    async def _warm_users(self) -> None:
        """Once every guild has arrived, load the cached members' user rows in bulk.

        Each member's first turn would load its row (or learn there is none)
        one query at a time: 0.3 queries a message for minutes after a start
        on the production scenario. Bounded by half the user cache's cap; a
        failing database leaves the misses to load as before.
        """
        from caches.layers.user import user_ttl, warm_users
        from caches.warm import USERS

        await self.client.wait_until_ready()
        members = {
            member.id
            for guild in self.client.guilds
            for member in guild.members
            if not member.bot
        }
        limit = knobs().USER_CACHE_MAX_ENTRIES // 2
        started = time.monotonic()
        try:
            stored = await warm_users(members, limit=limit)
        except DB_ERRORS as exc:
            logger.warning("users not warmed (%s); loaded on use", type(exc).__name__)
            return
        if knobs().WORKER_REFRESH_AHEAD:
            self.refresh.add(USERS, user_ttl() / 2)
            self.refresh.start([USERS])
        logger.info(
            "users warmed: %d entries for %d cached members in %.2f s",
            stored,
            min(len(members), limit),
            time.monotonic() - started,
        )

    async def _freeze_start_up(self) -> None:
        """Once every guild has arrived, keep the start-up heap out of full GCs."""
        from tomori.bot.gc_policy import freeze_start_up

        await self.client.wait_until_ready()
        freeze_start_up()

    async def _start_simulator(self) -> None:
        from tomori.bot.discord_target import point_discord_at, simulator_urls

        if self.options.simulator_url:
            # Another process serves it (and sends the traffic): a production
            # worker holds no simulated world.
            base_url, gateway_url = simulator_urls(self.options.simulator_url)
            point_discord_at((base_url, gateway_url))
            logger.info("simulated Discord at %s (another process)", base_url)
            return
        from tomori.bot.simulator import SimulatedDiscord

        self.simulator = SimulatedDiscord(self.options.scenario)
        await self.simulator.start()
        point_discord_at(self.simulator)
        self._running.cleanups.append(self.simulator.stop)
        logger.info("simulated Discord at %s", self.simulator.base_url)

    async def _drive_traffic(self) -> None:
        await self.client.wait_until_ready()
        await self.simulator.run_traffic(rate_per_second=self.options.traffic_rate)

    async def _close_client(self) -> None:
        """Close the gateway and the HTTP session (once the turns have ended)."""
        if self.client is not None:
            # Shielded: a step's timeout must not cancel discord.py's closing
            # task, which a later close() would await and re-raise.
            await asyncio.shield(self.client.close())

    async def _close_gateway(self) -> None:
        if self.client is not None:
            await asyncio.shield(self.client.close_gateway())

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        task.add_done_callback(self._task_done)
        self._running.tasks.append(task)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        logger.error("worker task %s died", task.get_name(), exc_info=task.exception())
        if task.get_name() in ("discord-client", "shard-lock"):
            self.stop()

    async def _every(
        self,
        seconds: float,
        job: Callable[[], Awaitable[None]],
        *,
        first_after: bool = False,
    ) -> None:
        await run_periodically(
            job,
            every=seconds,
            stop=self.stop_event,
            name=f"job {job.__name__}",
            first_after=first_after,
        )

    async def _wait_until_done(self) -> None:
        if self.options.duration is None:
            await self.stop_event.wait()
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), self.options.duration)

    async def _finish_turns(self, until: float) -> None:
        """Close the gateway; let the running turns finish until `until` (loop time)."""
        try:
            await asyncio.wait_for(self._close_gateway(), SHUTDOWN_STEP_SECONDS)
        except Exception:  # noqa: BLE001 (shut down as much as possible)
            logger.exception("closing the gateway failed")
        if self.pipeline is not None:
            within = max(0.0, until - asyncio.get_running_loop().time())
            await self.pipeline.stop_turns(within)

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop)

    async def shutdown(self) -> int:
        """Stop intake and turns, close the client, timers and bus, flush; return the exit code."""
        timeout = knobs().WORKER_SHUTDOWN_TIMEOUT_SECONDS
        now = asyncio.get_running_loop().time()
        self._watchdog = _arm_watchdog(timeout + WATCHDOG_GRACE_SECONDS)
        self.stop()  # if no signal did: the intake closes before anything else
        flush = DurableFlush(now + timeout)  # beside every step: the whole budget
        await self._finish_turns(now + turns_budget(timeout))
        # The client's close (the HTTP session) comes first here: no turn is left.
        for cleanup in reversed(self._running.cleanups):
            await _shutdown_step(cleanup)
        for task in self._running.tasks:
            task.cancel()
        await asyncio.gather(*self._running.tasks, return_exceptions=True)
        unstored = await flush.finish()
        set_current_guard(None)
        live.withdraw_snapshot(self.worker_id)
        if self.pipeline is not None:
            logger.info("%s", resolved_line(self.pipeline.responder))
        self.consistency.log_summary()
        self._lock.release()
        logger.info("worker %s stopped", self.worker_id)
        return EXIT_UNFLUSHED if unstored else 0

    def disarm_watchdog(self) -> None:
        """Stop the shutdown watchdog (the process is about to exit by itself)."""
        if self._watchdog is not None:
            self._watchdog.cancel()


def resolved_line(responder: Any) -> str:
    """Return the shutdown's line on the turns resolved (and replies, when it sends any)."""
    outcomes = {str(getattr(k, "value", k)): n for k, n in responder.by_outcome.items()}
    line = f"turns resolved: {responder.total} {outcomes}"
    if hasattr(responder, "replies"):
        line += (
            f"; replies: {responder.replies} sent, {responder.reply_failures} failed, "
            f"{responder.replies_cancelled} cancelled at shutdown"
        )
    return line


async def _shutdown_step(cleanup: Callable[[], Awaitable[None] | None]) -> None:
    """Run one cleanup, waiting at most SHUTDOWN_STEP_SECONDS for it."""
    name = getattr(cleanup, "__qualname__", repr(cleanup))
    try:
        result = cleanup()
        if result is not None:
            await asyncio.wait_for(result, SHUTDOWN_STEP_SECONDS)
    except TimeoutError:
        logger.error(
            "shutdown step %s did not finish within %.0f s: not waiting for it",
            name,
            SHUTDOWN_STEP_SECONDS,
        )
    except Exception:  # noqa: BLE001 (shut down as much as possible)
        logger.exception("shutdown step %s failed", name)


def _arm_watchdog(seconds: float) -> threading.Timer:
    """End the process `seconds` from now unless disarmed (shutdown or exit hangs)."""

    def expire() -> None:
        logger.error("shutdown still running after %.1f s: exiting now", seconds)
        _exit_now(EXIT_UNFLUSHED)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.name = "shutdown-watchdog"
    timer.start()
    return timer


def exit_if_blocked_in_database(code: int) -> None:
    """Exit with `code` now if a database call still runs (its thread would hold exit)."""
    blocked = database_calls().stuck_calls(older_than=0.0)
    if blocked:
        logger.warning(
            "%d database call(s) still blocked: exiting without waiting for them",
            blocked,
        )
        _exit_now(code)


def _exit_now(code: int) -> None:
    """Flush the logs and standard streams, then end the process without joining threads."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
