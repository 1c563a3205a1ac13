"""The scrape-time collector: reads a worker's counters when Prometheus asks.

Nothing here runs on the hot path: every figure is a counter the caches,
the bus, the pipeline and the guard already keep, read at scrape time on
the endpoint's thread. Those reads are GIL-safe: cache `stats()` reads ints
and `len()` of the underlying dicts without expiring anything, bus stats are
taken under their lock, and dict counters are copied in one C call. What
needs a walk over loop-owned dicts comes from what the loop refreshed:
discord.py counts from `LoopFigures`, size estimates from the worker's
`CacheBytesEstimator`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import Metric

from caches.memory.readers import read_process_memory, read_rss_bytes
from caches.registry import CacheRegistry
from metrics.prometheus import bus_families as bus_metrics
from metrics.prometheus import dependency_families as dependency_metrics
from metrics.prometheus import families
from metrics.prometheus import memory_families as memory_metrics
from metrics.prometheus.health import WorkerHealth
from metrics.prometheus.sampled import LoopFigures
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)


@dataclass
class WorkerSources:
    """Where the collector reads a worker's state (getters: it changes as it starts)."""

    worker_id: str
    shard_ids: list[int] | None
    shard_count: int | None
    started_at: float
    registry: CacheRegistry
    figures: LoopFigures
    health: WorkerHealth
    bus: Callable[[], Any]
    client: Callable[[], Any]
    pipeline: Callable[[], Any]
    guard: Callable[[], Any]
    memory_limit: Callable[[], int]
    size_sample: int = 0
    #: The worker's CacheBytesEstimator (metrics/cache_bytes.py), or None.
    cache_bytes: Callable[[], Any] = lambda: None
    consistency: Callable[[], Any] = lambda: None
    #: The worker's CatalogSet (caches/catalogs/catalog_set.py), or None.
    catalogs: Callable[[], Any] = lambda: None


class WorkerCollector:
    """A prometheus_client collector over one worker's `WorkerSources`."""

    def __init__(self, sources: WorkerSources) -> None:
        self.sources = sources
        self._failing: set[str] = set()

    def collect(self) -> Iterator[Metric]:
        """Yield every family; a part that fails is logged once and left out."""
        parts: dict[str, Callable[[], Iterator[Metric]]] = {
            "worker": self._worker,
            "caches": self._caches,
            "discord": self._discord,
            "memory": self._memory,
            "turns": self._turns,
            "bus": self._bus,
            "emergency": self._emergency,
            "consistency": self._consistency,
            "database": self._database,
            "catalogs": self._catalogs,
            "metric_samples": self._metric_samples,
        }
        for name, part in parts.items():
            try:
                metrics = list(part())
            except Exception:  # a scrape missing one part beats a failed scrape
                if name not in self._failing:
                    logger.exception("metrics: %s unavailable", name)
                self._failing.add(name)
                continue
            self._failing.discard(name)
            yield from metrics

    def _worker(self) -> Iterator[Metric]:
        src = self.sources
        ready, _ = src.health.readiness()
        shards = "-".join(map(str, src.shard_ids)) if src.shard_ids else "none"
        yield from families.worker_families(
            worker_id=src.worker_id,
            shards=shards,
            shard_count=str(src.shard_count or 1),
            started_at=src.started_at,
            ready=ready,
            refresh_step=max(src.figures.longest_step, self._estimate_step()),
        )

    def _caches(self) -> Iterator[Metric]:
        stats = {e.name: e.cache.stats() for e in self.sources.registry.entries()}
        yield from families.cache_families(stats)
        estimator = self.sources.cache_bytes()
        if self.sources.size_sample > 0 and estimator is not None:
            yield families.cache_bytes_family(
                estimator.estimates, self.sources.size_sample
            )

    def _estimate_step(self) -> float:
        estimator = self.sources.cache_bytes()
        return 0.0 if estimator is None else float(estimator.longest_step)

    def _discord(self) -> Iterator[Metric]:
        figures = self.sources.figures
        yield from families.discord_families(
            figures.discord,
            connected=figures.gateway_connected,
            latency=figures.gateway_latency,
        )

    def _memory(self) -> Iterator[Metric]:
        guard = self.sources.guard()
        limit = guard.limit_bytes if guard is not None else self.sources.memory_limit()
        yield from memory_metrics.memory_families(
            rss_bytes=read_rss_bytes(),
            limit_bytes=limit,
            guard=guard,
            process=read_process_memory(),
        )

    def _turns(self) -> Iterator[Metric]:
        pipeline = self.sources.pipeline()
        client = self.sources.client()
        counters = getattr(pipeline, "counters", None)
        timings = getattr(client, "turn_timings", None)
        yield from families.turn_families(counters, timings)

    def _bus(self) -> Iterator[Metric]:
        bus = self.sources.bus()
        yield from bus_metrics.bus_families(bus.snapshot(), bus.stats.lag_histogram())
        bound = knobs().INVALIDATION_STALENESS_BOUND_SECONDS
        yield dependency_metrics.staleness_bound_family(bound)

    def _database(self) -> Iterator[Metric]:
        from caches.database import database_calls

        calls = database_calls()
        breakers = {"reads": calls.breaker, "writes": calls.writes_breaker}
        yield from dependency_metrics.breaker_families(
            breakers, timeouts=calls.timeouts
        )

    def _catalogs(self) -> Iterator[Metric]:
        catalogs = self.sources.catalogs()
        yield from dependency_metrics.catalog_families(catalogs or ())

    def _metric_samples(self) -> Iterator[Metric]:
        from metrics.logger import default_writer
        from metrics.repository import default_repository

        yield from dependency_metrics.metric_sample_families(
            inserted=default_repository.inserted,
            failures=default_repository.failures,
            dropped=default_writer().dropped,
        )

    def _consistency(self) -> Iterator[Metric]:
        watcher = self.sources.consistency()
        summary = watcher.summary() if watcher is not None else {}
        yield from families.consistency_families(summary)

    def _emergency(self) -> Iterator[Metric]:
        from caches.memory.emergency import totals

        yield from memory_metrics.emergency_families(*totals.snapshot())
