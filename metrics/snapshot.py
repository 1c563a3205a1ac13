"""The cache_sizes snapshot: every cache's size, discord.py counts, memory, loop lag."""

from __future__ import annotations

import logging
from typing import Any

from caches.memory.readers import read_memory_figures
from tomori.knobs import knobs

logger = logging.getLogger(__name__)


def build_cache_sizes_snapshot(
    *,
    worker_id: str,
    client: Any = None,
    guard: Any = None,
    loop_lag: float | None = None,
) -> dict[str, Any]:
    """Return one flat, JSON-ready ``cache_sizes`` snapshot.

    Sizes are entries currently resident, by the registry's spec names; with a
    discord.py ``client``, its cache counts come under ``discord_*``.
    ``loop_lag`` is the event loop's peak lag in ms since the last sample.
    """
    snapshot: dict[str, Any] = {"worker_id": worker_id, **_shard_fields(client)}
    snapshot.update(_registry_sizes())
    if client is not None:
        snapshot.update(_discord_counts(client))
    snapshot.update(_memory_fields(guard))
    snapshot["loop_lag_peak_ms"] = loop_lag
    return snapshot


def _registry_sizes() -> dict[str, int]:
    from caches.registry import registry

    sizes = registry.sizes()
    return {**sizes, "cache_entries_total": sum(sizes.values())}


def _discord_counts(client: Any) -> dict[str, int]:
    from caches.discord_caches import count_discord_caches

    try:
        counts = count_discord_caches(client)
    except Exception:  # a client mid-connect must not cost the whole sample
        logger.exception("counting discord.py caches failed")
        return {}
    total = sum(value for key, value in counts.items() if key != "discord_presences")
    return {**counts, "discord_entries_total": total}


def _shard_fields(client: Any) -> dict[str, Any]:
    if client is None:
        return {}
    shard_ids = getattr(client, "shard_ids", None)
    shard_id = getattr(client, "shard_id", None)
    if shard_ids is None and shard_id is not None:
        shard_ids = [shard_id]
    return {
        "shard_ids": None if shard_ids is None else list(shard_ids),
        "shard_count": getattr(client, "shard_count", None),
    }


def _memory_fields(guard: Any) -> dict[str, Any]:
    memory = read_memory_figures(
        configured_mb=knobs().CONTAINER_MEMORY_LIMIT_MB, guard=guard
    )
    fields = dict(memory.process)
    if memory.state is not None:
        fields["memory_state"] = memory.state
    fields["memory_limit_mb"] = memory.limit_mb
    fields["memory_limit_source"] = memory.limit_source
    fields["memory_percent"] = memory.percent
    return fields
