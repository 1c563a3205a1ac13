"""Wire the metrics endpoint into a bot worker: collector, probes and the loop-side refresh."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from caches.core.periodic import run_periodically
from metrics.prometheus.collector import WorkerCollector, WorkerSources
from metrics.prometheus.endpoint import MetricsEndpoint, make_app
from metrics.prometheus.gc_pauses import GcPauseCollector
from metrics.prometheus.health import WorkerHealth
from metrics.prometheus.sampled import LoopFigures, note_gateway, refresh_figures
from metrics.prometheus.threads import ThreadCpuCollector
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

#: How often the loop heartbeat (and the gateway state) is taken.
HEARTBEAT_SECONDS = 1.0


class ObservedWorker(Protocol):
    """What the endpoint reads from a bot worker (`tomori.bot.worker.BotWorker`)."""

    worker_id: str
    started_at: float
    stop_event: asyncio.Event
    client: Any
    pipeline: Any
    guard: Any
    options: Any
    cache_bytes: Any  # metrics.cache_bytes.CacheBytesEstimator


def build_registry(sources: WorkerSources) -> CollectorRegistry:
    """Return a registry with the worker's collector and the process/GC/platform ones."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(sources))
    ProcessCollector(registry=registry)
    registry.register(ThreadCpuCollector())
    GCCollector(registry=registry)
    registry.register(GcPauseCollector())
    PlatformCollector(registry=registry)
    return registry


class WorkerObservability:
    """One worker's endpoint, health flags and loop-side figures."""

    def __init__(
        self,
        worker: ObservedWorker,
        *,
        address: str,
        port: int,
        refresh_seconds: float,
        size_sample: int,
        memory_limit_bytes: int,
    ) -> None:
        from caches import bus
        from caches.registry import registry

        self.worker = worker
        self.refresh_seconds = refresh_seconds
        self.size_sample = size_sample
        self.figures = LoopFigures()
        self.health = WorkerHealth(
            figures=self.figures,
            bus_connected=lambda: bus.get_bus().stats.connected,
            stopping=worker.stop_event.is_set,
        )
        self.sources = WorkerSources(
            worker_id=worker.worker_id,
            shard_ids=worker.options.shard_ids,
            shard_count=worker.options.shard_count,
            started_at=worker.started_at,
            registry=registry,
            figures=self.figures,
            health=self.health,
            bus=bus.get_bus,
            client=lambda: worker.client,
            pipeline=lambda: worker.pipeline,
            guard=lambda: worker.guard,
            memory_limit=lambda: memory_limit_bytes,
            size_sample=size_sample,
            cache_bytes=lambda: worker.cache_bytes,
            consistency=lambda: getattr(worker, "consistency", None),
            catalogs=lambda: getattr(worker, "catalogs", None),
        )
        self.registry = build_registry(self.sources)
        self.endpoint = MetricsEndpoint(
            make_app(self.registry, self.health), address=address, port=port
        )

    def start(self) -> str:
        """Serve the endpoint; return its URL. Raises OSError if it cannot bind."""
        self.endpoint.start()
        logger.info(
            "metrics at %s/metrics (probes: /healthz, /readyz)", self.endpoint.url
        )
        return self.endpoint.url

    def caches_warmed(self) -> None:
        """Note that the start-up warm-up is done (readiness needs it)."""
        self.health.caches_warmed = True

    async def run(self, stop: asyncio.Event) -> None:
        """Beat every second and refresh the loop-side figures on their interval."""
        next_refresh = 0.0

        async def beat() -> None:
            nonlocal next_refresh
            self.health.beat()
            now = time.monotonic()
            if now >= next_refresh:
                await self.refresh()
                next_refresh = now + self.refresh_seconds
            else:
                note_gateway(self.figures, self.worker.client)

        await run_periodically(
            beat, every=HEARTBEAT_SECONDS, stop=stop, name="metrics heartbeat"
        )

    async def refresh(self) -> None:
        """Recompute discord.py counts and the gateway state now."""
        started = time.perf_counter()
        try:
            refresh_figures(self.figures, client=self.worker.client)
        except Exception:  # noqa: BLE001 (the next refresh tries again)
            logger.exception("metrics: refreshing loop-side figures failed")
        logger.debug(
            "metrics refresh took %.1f ms, holding the loop %.1f ms at most",
            1000 * (time.perf_counter() - started),
            1000 * self.figures.longest_step,
        )

    def stop(self) -> None:
        """Stop serving."""
        self.endpoint.stop()


def observability_from_settings(worker: ObservedWorker) -> WorkerObservability | None:
    """Return the worker's endpoint as METRICS_* configure it, or None if METRICS_PORT is unset."""
    from caches.memory.readers import detect_memory_limit_bytes

    current = knobs()
    if current.METRICS_PORT is None:
        return None
    limit, _ = detect_memory_limit_bytes(
        configured_mb=current.CONTAINER_MEMORY_LIMIT_MB
    )
    return WorkerObservability(
        worker,
        address=current.METRICS_ADDRESS,
        port=current.METRICS_PORT,
        refresh_seconds=current.METRICS_REFRESH_SECONDS,
        size_sample=current.METRICS_SIZE_SAMPLE_ENTRIES,
        memory_limit_bytes=limit,
    )
