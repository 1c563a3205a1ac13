"""Sampled estimates of the bytes each cache holds, refreshed on the event loop.

An estimate walks up to METRICS_SIZE_SAMPLE_ENTRIES entries of every core
map behind a cache (a deep ``sys.getsizeof``; an object several holders
share is apportioned among them, classes and functions count nothing) and
scales the walk to the map's entry count. The caches belong to the event loop (iterating a dict the loop
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
    """One estimate's object budget.

    An object held by several holders (a short-term memory message kept by
    the user's and the channel's entries and by the next turns' too) is
    apportioned: each holder is charged its share, the object's size (and
    what it refers to) divided by its holders, the referrers CPython counts
    for it. So a cache's estimate counts a message its entries share once,
    and an interned name or a small int shared by the whole process about
    nothing. The roots (a sampled key and value) are the cache's own and
    charged whole.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def size(self, obj: Any, depth: int = 0, share: float = 1.0) -> float:
        if isinstance(obj, _SHARED):
            return 0.0
        self.budget -= 1
        size = sys.getsizeof(obj, 0) * share
        if isinstance(obj, _ATOMIC) or depth >= MAX_DEPTH or self.budget <= 0:
            return size
        children, total = _children(obj)
        if not children:
            return size
        walked = 0.0
        for child in children:
            # The referrers of `child` besides the walk's own three (the
            # `children` list, this loop's variable and getrefcount's argument).
            holders = sys.getrefcount(child) - _WALK_REFERENCES
            walked += self.size(child, depth + 1, share / max(holders, 1))
        return size + walked * total / len(children)


#: References the walk's loop holds to a child while it counts its referrers.
_WALK_REFERENCES = 3


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
    an object with several referrers is apportioned among them (see
    `_Walk`); big containers are scaled from their first MAX_CHILDREN
    children; the walk stops after `budget` objects.
    """
    return round(_Walk(budget).size(obj))


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
            total += round(sampled * len(store) / len(entries))
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
