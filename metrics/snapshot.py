"""The cache_sizes row: a worker snapshot's sizes and bytes, discord.py counts, memory, loop lag."""

from __future__ import annotations

from typing import Any

from caches.messages import WorkerSnapshot


def cache_sizes_row(
    snapshot: WorkerSnapshot, *, loop_lag: float | None = None
) -> dict[str, Any]:
    """Return one flat, JSON-ready ``cache_sizes`` row read from ``snapshot``.

    Sizes are entries currently resident, by the registry's spec names;
    discord.py's cache counts come under ``discord_*`` when the worker has a
    client. ``loop_lag`` is the event loop's peak lag in ms since the last sample.
    Each cache's sampled bytes estimate, where the snapshot has one, goes in
    one nested ``bytes_estimate`` field (``{cache: bytes}``), so the charts do
    not read it as a cache.
    """
    row: dict[str, Any] = {
        "worker_id": snapshot.worker_id,
        "shard_ids": None if snapshot.shard_ids is None else list(snapshot.shard_ids),
        "shard_count": snapshot.shard_count,
    }
    sizes = {name: stats.size for name, stats in snapshot.caches.items()}
    row.update(sizes, cache_entries_total=sum(sizes.values()))
    row["bytes_estimate"] = {
        name: stats.bytes_estimate
        for name, stats in snapshot.caches.items()
        if stats.bytes_estimate is not None
    }
    if snapshot.discord:
        row.update(snapshot.discord, discord_entries_total=_discord_total(snapshot))
    row.update(_memory_fields(snapshot))
    row["loop_lag_peak_ms"] = loop_lag
    return row


def _discord_total(snapshot: WorkerSnapshot) -> int:
    # Presences are a scan of members, not entries of their own.
    counts = snapshot.discord.items()
    return sum(value for key, value in counts if key != "discord_presences")


def _memory_fields(snapshot: WorkerSnapshot) -> dict[str, Any]:
    memory = snapshot.memory
    if memory is None:
        return {}
    fields: dict[str, Any] = {
        "rss_mb": memory.rss_mb,
        "python_allocated_blocks": memory.python_allocated_blocks,
        **memory.extra,
    }
    for name in ("vips_tracked_mem_mb", "vips_tracked_mem_highwater_mb"):
        if getattr(memory, name) is not None:
            fields[name] = getattr(memory, name)
    if memory.state is not None:
        fields["memory_state"] = memory.state
    fields.update(
        memory_limit_mb=memory.limit_mb,
        memory_limit_source=memory.limit_source,
        memory_percent=memory.percent,
    )
    return fields


def build_cache_sizes_snapshot(
    *,
    worker_id: str,
    client: Any = None,
    guard: Any = None,
    loop_lag: float | None = None,
) -> dict[str, Any]:
    """Return the ``cache_sizes`` row of this process's registry and ``client``.

    Built from the same worker snapshot the dashboard shows
    (`caches.operations.build_worker_snapshot`).
    """
    from caches.operations.snapshot import build_worker_snapshot
    from caches.operations.worker import WorkerContext

    context = WorkerContext(worker_id=worker_id, client=client)
    snapshot = build_worker_snapshot(context=context, guard=guard)
    return cache_sizes_row(snapshot, loop_lag=loop_lag)
