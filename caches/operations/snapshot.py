"""Build a bot worker's snapshot: the one source of the dashboard and the `cache_sizes` row."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from caches.messages import CacheStats, MalformedMessage, MemoryFigures, WorkerSnapshot
from caches.operations.worker import WorkerContext
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _safely(part: str, fn: Callable[[], T], default: T) -> T:
    try:
        return fn()
    except Exception:  # a snapshot missing one part beats no snapshot
        logger.exception("worker snapshot: %s unavailable", part)
        return default


def _caches(context: WorkerContext) -> dict[str, CacheStats]:
    caches = {}
    for name, stats in context.registry.stats().items():
        try:
            caches[name] = CacheStats.from_json(stats)
        except MalformedMessage as exc:  # one odd layer must not hide the others
            logger.warning("worker snapshot: stats of %s left out: %s", name, exc)
    return caches


def _discord(client: Any) -> dict[str, int]:
    if client is None:
        return {}
    from caches.discord_caches import PRESENCES_MAX_AGE_SECONDS, count_discord_caches

    return dict(
        count_discord_caches(client, presences_max_age=PRESENCES_MAX_AGE_SECONDS)
    )


def _shards(context: WorkerContext) -> tuple[tuple[int, ...] | None, int | None]:
    client = context.current_client()
    shard_ids = context.shard_ids
    if shard_ids is None and client is not None:
        shard_ids = getattr(client, "shard_ids", None)
        shard_id = getattr(client, "shard_id", None)
        if shard_ids is None and shard_id is not None:
            shard_ids = [shard_id]
    count = getattr(client, "shard_count", None) if client is not None else None
    return (None if shard_ids is None else tuple(shard_ids)), count


def _memory(guard: Any) -> MemoryFigures:
    return MemoryFigures.from_json(_memory_figures(guard))


def _memory_figures(guard: Any) -> dict[str, Any]:
    from caches.memory.readers import read_memory_figures

    memory = read_memory_figures(
        configured_mb=knobs().CONTAINER_MEMORY_LIMIT_MB, guard=guard
    )
    figures: dict[str, Any] = {
        "rss_mb": memory.rss_mb,
        "python_allocated_blocks": memory.process.get("python_allocated_blocks"),
        "limit_mb": memory.limit_mb,
        # "guard" (a limit of its own), "configured", "cgroup_v1"/"cgroup_v2",
        # "host_total" (no container limit: the host's memory stands in) or
        # "unknown".
        "limit_source": memory.limit_source,
        "percent": memory.percent,
        "state": memory.state,
    }
    if guard is not None:
        status = guard.status()
        figures.update(
            warning_percent=status.get("warning_percent"),
            critical_percent=status.get("critical_percent"),
            emergencies=status.get("emergencies"),
        )
    figures.update({k: v for k, v in memory.process.items() if k.startswith("vips_")})
    return figures


def flatten_bus_status(status: dict[str, Any] | None) -> dict[str, Any]:
    """Return bus stats with the lag summary also as `lag_p50_ms`/`lag_p99_ms`."""
    flat = dict(status or {})
    lag = flat.get("lag")
    if isinstance(lag, dict):
        for name in ("p50_ms", "p99_ms", "max_ms"):
            flat.setdefault(f"lag_{name}", lag.get(name))
    return flat


def build_worker_snapshot(
    *,
    context: WorkerContext,
    started_at: float | None = None,
    guard: Any = None,
    bus_status: dict[str, Any] | None = None,
) -> WorkerSnapshot:
    """Return this worker's snapshot, for `caches.live.publish_snapshot` and metrics."""
    catalogs = context.catalogs
    shard_ids, shard_count = _shards(context)
    return WorkerSnapshot(
        worker_id=context.worker_id,
        shard_ids=shard_ids,
        shard_count=shard_count,
        published_at=time.time(),
        started_at=started_at,
        caches=_safely("caches", lambda: _caches(context), {}),
        discord=_safely("discord", lambda: _discord(context.current_client()), {}),
        memory=_safely("memory", lambda: _memory(guard), None),
        bus={**flatten_bus_status(bus_status), "commands_run": context.commands_run},
        catalogs={} if catalogs is None else _safely("catalogs", catalogs.status, {}),
    )
