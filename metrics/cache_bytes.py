"""Sampled estimates of the bytes each cache holds, refreshed on the event loop.

An estimate walks up to METRICS_SIZE_SAMPLE_ENTRIES entries of every core
map behind a cache (a deep ``sys.getsizeof``, each object counted once,
classes and functions not at all) and scales the walk to the map's entry
count. The caches belong to the event loop (iterating a dict the loop
mutates can raise), so the worker refreshes the estimates there every
METRICS_REFRESH_SECONDS, one cache per loop iteration, each walk bounded to
MAX_OBJECTS objects per map, and everything else reads the last result:
``cache_stats`` and the dashboard through the worker snapshot, the
``cache_sizes`` rows, and ``tomori_cache_estimated_bytes`` when METRICS_PORT
is set.
"""

from __future__ import annotations

import asyncio
import enum
import sys
import time
import types
from collections.abc import Callable, Mapping
from itertools import chain, islice
from typing import Any

from caches.core.store import ExpiringStore
from caches.registry import CacheRegistry
from metrics.logger import Waiter, wait_or_stop

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
    """Return the core maps behind a registered cache (`ManagedCache.maps`)."""
    return [m for m in cache.maps().values() if isinstance(m, ExpiringStore)]


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


class CacheBytesEstimator:
    """Every cache's last sampled bytes estimate, recomputed on the loop by ``run``.

    ``estimates`` is replaced whole after each refresh, never mutated, so any
    thread may read it. ``sample`` 0 turns the estimates off (always empty).
    """

    def __init__(
        self,
        registry: CacheRegistry,
        *,
        sample: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.sample = sample
        self._clock = clock
        self.estimates: dict[str, int] = {}
        self.refreshed_at: float | None = None  # by the clock
        self.longest_step = 0.0  # seconds one cache's walk held the loop

    async def refresh(self) -> dict[str, int]:
        """Re-estimate every cache, yielding to the loop between caches; return them."""
        if self.sample <= 0:
            return self.estimates
        estimates: dict[str, int] = {}
        longest = 0.0
        for entry in self.registry.entries():
            await asyncio.sleep(0)  # one cache per loop iteration
            started = time.perf_counter()
            estimate = estimate_cache_bytes(entry.cache, sample=self.sample)
            longest = max(longest, time.perf_counter() - started)
            if estimate is not None:
                estimates[entry.name] = estimate
        self.estimates, self.longest_step = estimates, longest
        self.refreshed_at = self._clock()
        return estimates

    async def run(
        self,
        stop: asyncio.Event,
        *,
        interval_seconds: float,
        wait: Waiter = wait_or_stop,
    ) -> None:
        """Refresh at once, then every ``interval_seconds`` until ``stop`` is set."""
        while not stop.is_set():
            await self.refresh()
            await wait(stop, interval_seconds)
