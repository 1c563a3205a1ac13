"""Figures a scrape must not read from its own thread, recomputed on the event loop.

Counting presences walks every cached member: iterating a dict that the loop
thread mutates can raise, so it runs on the loop every METRICS_REFRESH_SECONDS
and the scrape reads the last result (whole dicts, replaced at once, never
mutated in place). The cache size estimates are the worker's own
(metrics/cache_bytes.py), refreshed on the loop with or without this endpoint.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoopFigures:
    """The last loop-side readings; each attribute is replaced, never mutated."""

    discord: dict[str, int] = field(default_factory=dict)
    gateway_connected: bool = False
    gateway_latency: dict[str, float] = field(default_factory=dict)
    refreshed_at: float | None = None  # time.monotonic()
    longest_step: float = 0.0  # seconds the loop was held by one refresh step


def gateway_state(client: Any) -> tuple[bool, dict[str, float]]:
    """Return whether every shard's gateway is connected, and each shard's latency."""
    if client is None or client.is_closed() or not client.is_ready():
        return False, {}
    shards = getattr(client, "shards", None)
    if isinstance(shards, dict) and shards:
        connections = [
            (str(i), not s.is_closed(), s.latency) for i, s in shards.items()
        ]
    else:
        ws = getattr(client, "ws", None)
        shard = str(getattr(client, "shard_id", None) or 0)
        connections = [(shard, ws is not None and ws.open, client.latency)]
    latency = {shard: lat for shard, _, lat in connections if math.isfinite(lat)}
    return all(up for _, up, _ in connections), latency


def refresh_figures(figures: LoopFigures, *, client: Any) -> None:
    """Recompute the discord.py counts and the gateway state into `figures`, on the loop."""
    from caches.discord_caches import PRESENCES_MAX_AGE_SECONDS, count_discord_caches

    started = time.perf_counter()
    figures.discord = (
        {}
        if client is None
        else dict(
            count_discord_caches(client, presences_max_age=PRESENCES_MAX_AGE_SECONDS)
        )
    )
    note_gateway(figures, client)
    figures.longest_step = time.perf_counter() - started
    figures.refreshed_at = time.monotonic()


def note_gateway(figures: LoopFigures, client: Any) -> None:
    """Record the gateway's state in `figures` (cheap: the heartbeat calls it)."""
    figures.gateway_connected, figures.gateway_latency = gateway_state(client)
