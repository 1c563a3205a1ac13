"""Build the live snapshot a bot worker publishes for the dashboard (shape: see package doc)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from caches.operations.worker import WorkerContext
from tomori.knobs import knobs

logger = logging.getLogger(__name__)


def _safely(part: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except Exception:  # a snapshot missing one part beats no snapshot
        logger.exception("worker snapshot: %s unavailable", part)
        return {}


def _caches(context: WorkerContext) -> dict[str, Any]:
    stats = context.registry.stats()
    for layer in stats.values():
        # Served from a last good value after a failed reload (only layers that
        # keep one have any).
        layer.setdefault("stale_entries", 0)
    return stats


def _discord(client: Any) -> dict[str, Any]:
    if client is None:
        return {}
    from caches.discord_caches import count_discord_caches

    return dict(count_discord_caches(client))


def _memory(guard: Any) -> dict[str, Any]:
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
    started_at: float,
    guard: Any = None,
    bus_status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return this worker's live snapshot, ready for `caches.live.publish_snapshot`."""
    catalogs = context.catalogs
    return {
        "worker_id": context.worker_id,
        "shard_ids": context.shard_ids,
        "published_at": time.time(),
        "started_at": started_at,
        "caches": _safely("caches", lambda: _caches(context)),
        "discord": _safely("discord", lambda: _discord(context.current_client())),
        "memory": _safely("memory", lambda: _memory(guard)),
        "bus": {
            **flatten_bus_status(bus_status),
            "commands_run": context.commands_run,
        },
        "catalogs": {} if catalogs is None else _safely("catalogs", catalogs.status),
    }
