"""The knobs of what the operator sees: metrics, invalidation delivery, Prometheus and health."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tomori.domain.knobs.declare import knob


@dataclass(frozen=True, kw_only=True)
class MetricsKnobs:
    """The JSON metric lines, the metric_samples table and the worker snapshots."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Metrics"

    METRICS_LOG_FILE: Path | None = knob(
        None,
        "File the JSON metric lines (cache_sizes, host_memory, memory guard) are "
        "appended to instead of the console; empty: the console, for a log shipper. "
        "`make run` sets var/log/metrics.jsonl.",
    )
    CACHE_METRICS_INTERVAL_MS: int = knob(
        300_000,
        "Interval of the cache_sizes and host_memory samples.",
        minimum=1000,
    )
    METRIC_SAMPLE_RETENTION_DAYS: int = knob(
        30,
        "metric_samples rows older than this are pruned on the write path.",
        minimum=1,
        maximum=3650,
    )
    METRIC_SAMPLE_PRUNE_INTERVAL_MS: int = knob(
        21_600_000,
        "Pruning runs at most this often, after a successful insert.",
        minimum=1000,
    )
    WORKER_SNAPSHOT_INTERVAL_SECONDS: float = knob(
        5.0,
        "How often a bot worker publishes its live cache snapshot for the admin.",
        minimum=0.1,
        maximum=3600,
    )
    CACHE_COMMAND_TIMEOUT_SECONDS: float = knob(
        3.0,
        "How long the admin and the management commands wait for workers to answer "
        "an operator command.",
        minimum=0.1,
        maximum=600,
    )


@dataclass(frozen=True, kw_only=True)
class InvalidationKnobs:
    """The outbox: how stale a worker may be when Redis fails, and the watcher."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Invalidation delivery"

    INVALIDATION_STALENESS_BOUND_SECONDS: float = knob(
        2.0,
        "Longest a committed change may be served stale by a bot worker when Redis "
        "or the writer fails (Redis cut, paused or restarted; writer killed after "
        "its commit). Workers read the invalidation outbox every quarter of it.",
        minimum=0.2,
        maximum=60,
    )
    CONSISTENCY_CHECKS_PER_SECOND: float = knob(
        2.0,
        "How many cached entries per second the consistency watcher re-reads from "
        "the database to compare (0 turns it off). Its whole database load.",
        minimum=0,
        maximum=100,
    )
    OUTBOX_RETENTION_MINUTES: int = knob(
        60,
        "Invalidation outbox rows older than this are pruned; a worker that could "
        "not read the outbox for longer clears every invalidatable cache.",
        minimum=5,
        maximum=10_080,
    )


@dataclass(frozen=True, kw_only=True)
class PrometheusKnobs:
    """A worker's /metrics endpoint and the admin's readiness URL."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Prometheus and health"

    METRICS_PORT: int | None = knob(
        None,
        "Port of a bot worker's HTTP endpoint: Prometheus metrics on /metrics, "
        "probes on /healthz and /readyz. Unset: no endpoint. 0 picks a free port "
        "(logged). One port per runbot process: give each shard process on a host "
        "its own.",
        minimum=0,
        maximum=65_535,
    )
    METRICS_ADDRESS: str = knob(
        "127.0.0.1",
        "Address the worker's metrics endpoint binds; 0.0.0.0 (or ::) lets a scraper "
        "on another host in.",
        kind="ip",
    )
    METRICS_REFRESH_SECONDS: float = knob(
        15.0,
        "How often a worker recomputes, on its event loop, the figures nothing may "
        "walk from another thread: each cache's sampled bytes estimate (with or "
        "without METRICS_PORT) and, for the metrics endpoint, discord.py cache "
        "counts.",
        minimum=1,
        maximum=3600,
    )
    METRICS_SIZE_SAMPLE_ENTRIES: int = knob(
        32,
        "Entries sampled per cache map for each cache's bytes estimate (a deep "
        "sys.getsizeof scaled to the entry count), shown by cache_stats, the "
        "dashboard, the cache_sizes rows and tomori_cache_estimated_bytes; 0 turns "
        "the estimate off.",
        minimum=0,
        maximum=10_000,
    )
    HEALTH_MIN_LIVE_WORKERS: int = knob(
        1,
        "Live bot workers the admin's readiness URL /health/ready/ requires; 0 lists "
        "them without requiring any.",
        minimum=0,
        maximum=10_000,
    )
    HEALTH_CHECK_TIMEOUT_SECONDS: float = knob(
        2.0,
        "How long /health/ready/ waits for the database and for Redis before it "
        "reports them down.",
        minimum=0.1,
        maximum=60,
    )
