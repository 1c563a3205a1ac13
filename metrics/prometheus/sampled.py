"""Figures a scrape must not read from its own thread, recomputed on the event loop.

Counting presences walks every cached member and a size estimate walks cache
entries: iterating a dict that the loop thread mutates can raise, so these
run on the loop every METRICS_REFRESH_SECONDS and the scrape reads the last
result (whole dicts, replaced at once, never mutated in place).
"""

from __future__ import annotations

import asyncio
import enum
import math
import sys
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any

from caches.core.store import ExpiringStore
from caches.registry import CacheRegistry

#: Objects an entry refers to but does not own (counted nowhere).
_SHARED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    enum.Enum,
)
_ATOMIC = (str, bytes, bytearray, int, float, complex, bool, type(None))
_SEQUENCES = (list, tuple, set, frozenset)
#: Children of one container that are walked; the rest are scaled from them.
MAX_CHILDREN = 256
MAX_DEPTH = 8
#: Objects walked per map per refresh, whatever the entries hold (~1 ms of loop time).
MAX_OBJECTS = 5_000


@dataclass
class LoopFigures:
    """The last loop-side readings; each attribute is replaced, never mutated."""

    discord: dict[str, int] = field(default_factory=dict)
    cache_bytes: dict[str, int] = field(default_factory=dict)
    gateway_connected: bool = False
    gateway_latency: dict[str, float] = field(default_factory=dict)
    refreshed_at: float | None = None  # time.monotonic()
    longest_step: float = 0.0  # seconds the loop was held by one refresh step


class _Walk:
    """One estimate's visited set and object budget."""

    def __init__(self, budget: int) -> None:
        self.seen: set[int] = set()
        self.budget = budget

    def size(self, obj: Any, depth: int = 0) -> int:
        if isinstance(obj, _SHARED) or id(obj) in self.seen:
            return 0
        self.seen.add(id(obj))
        self.budget -= 1
        size = sys.getsizeof(obj, 0)
        if isinstance(obj, _ATOMIC) or depth >= MAX_DEPTH or self.budget <= 0:
            return size
        children, total = _children(obj)
        if not children:
            return size
        walked = sum(self.size(child, depth + 1) for child in children)
        return size + walked * total // len(children)


def _children(obj: Any) -> tuple[list[Any], int]:
    """Return up to MAX_CHILDREN referents of `obj` and how many it has in all."""
    if isinstance(obj, Mapping):
        pairs = islice(obj.items(), MAX_CHILDREN // 2)
        return list(chain.from_iterable(pairs)), 2 * len(obj)
    if isinstance(obj, _SEQUENCES):
        return list(islice(obj, MAX_CHILDREN)), len(obj)
    values: list[Any] = list(getattr(obj, "__dict__", {}).values())
    for klass in type(obj).__mro__:
        for slot in getattr(klass, "__slots__", ()):
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                values.append(getattr(obj, slot))
    return values[:MAX_CHILDREN], len(values)


def deep_size(obj: Any, *, budget: int = MAX_OBJECTS) -> int:
    """Return the bytes `obj` and what it refers to take (sys.getsizeof, deep).

    Classes, functions, modules and enum members are shared, so not counted;
    an object referenced twice counts once; big containers are scaled from
    their first MAX_CHILDREN children; the walk stops after `budget` objects.
    """
    return _Walk(budget).size(obj)


def _stores(cache: Any) -> list[ExpiringStore[Any, Any]]:
    """Return the core maps behind a registered cache (itself, members or attributes)."""
    if isinstance(cache, ExpiringStore):
        return [cache]
    maps = getattr(cache, "maps", None)
    if callable(maps):
        return [m for m in maps().values() if isinstance(m, ExpiringStore)]
    return [v for v in vars(cache).values() if isinstance(v, ExpiringStore)]


def estimate_cache_bytes(cache: Any, *, sample: int) -> int | None:
    """Estimate the bytes of a cache's keys and values from `sample` entries per map.

    Returns None for a cache with no core map behind it (nothing to sample).
    Run it on the cache's own thread.
    """
    stores = _stores(cache)
    if not stores:
        return None
    total = 0
    for store in stores:
        entries = store.sample_items(sample)
        if entries:
            walk = _Walk(MAX_OBJECTS)
            sampled = sum(walk.size(key) + walk.size(value) for key, value in entries)
            total += sampled * len(store) // len(entries)
    return total


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


async def refresh_figures(
    figures: LoopFigures,
    *,
    registry: CacheRegistry,
    client: Any,
    sample: int,
) -> None:
    """Recompute every loop-side figure into `figures`, on the loop thread.

    It yields to the loop after the discord.py counts and after each cache,
    so no step holds the loop longer than one cache's sampled walk.
    """
    from caches.discord_caches import count_discord_caches

    started = time.perf_counter()
    figures.discord = {} if client is None else dict(count_discord_caches(client))
    longest = time.perf_counter() - started
    estimates: dict[str, int] = {}
    for entry in registry.entries() if sample > 0 else ():
        await asyncio.sleep(0)
        started = time.perf_counter()
        estimate = estimate_cache_bytes(entry.cache, sample=sample)
        longest = max(longest, time.perf_counter() - started)
        if estimate is not None:
            estimates[entry.name] = estimate
    figures.cache_bytes = estimates
    note_gateway(figures, client)
    figures.longest_step = longest
    figures.refreshed_at = time.monotonic()


def note_gateway(figures: LoopFigures, client: Any) -> None:
    """Record the gateway's state in `figures` (cheap: the heartbeat calls it)."""
    figures.gateway_connected, figures.gateway_latency = gateway_state(client)
