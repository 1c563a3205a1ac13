"""BoundedTTLCache: the bounded, TTL-aware map behind every cache layer.

Storage (the dict, deadlines, expiry, the cap and eviction order) is
`ExpiringStore` in `caches.core.store`; read its docstring for the layout and
the exact expiry and eviction rules. This class adds counted reads,
single-flight loading, invalidation and stats.

Loading (`caches.core.flight.SingleFlight`). Concurrent misses of one key
share one load, run as its own task; waiters await it through
`asyncio.shield`, so a cancelled waiter cancels only itself. A load whose key
is invalidated (or matched by invalidate_where or invalidate_prefix, or the
cache cleared) while it runs is detached: its waiters still get its result,
but it is not stored, and later callers start a fresh load rather than join
the stale one. A `set` of the key while its load runs is newer information
than that load: it detaches the load the same way, so the older result never
overwrites the value just set. A load of many keys by one call
(`load_many`: `reserve`, the call, `fill`) holds a task-less flight per key
meanwhile, so the same invalidations keep its values out, and loads only
into the room left under the cap. Inside `refreshing()` the same call
reloads the resident keys instead (refresh-ahead: a fresh value and deadline
before the old one expires) and loads no absent one.

Threads. The bot is single-threaded asyncio, and a cache is confined to the
thread that runs the event loop: it takes no locks (an uncontended lock here
costs more than the whole hit path, and about a third of a write). If another
thread reads anyway: a `get` that finds nothing expired is one `dict.get`,
atomic under the GIL, so it returns a correct value or a miss; but any call
that writes, invalidates, or has to drop expired entries first mutates the
order queues and can race with the loop thread and corrupt them. So another
thread must hop to the loop (`caches.core.loop.call_on_loop`,
`run_on_loop`) rather than call in. `get_or_load` is
bound to the running loop in any case (its in-flight loads are tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextvars import ContextVar
from typing import Any, TypeVar, overload

from caches.core.clock import Clock
from caches.core.flight import Flight, SingleFlight
from caches.core.markers import MISSING, DoNotCache, Missing
from caches.core.store import ExpiringStore, ScopeSpec

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")

Loader = Callable[[], Awaitable["V | DoNotCache[V]"]]

_REFRESHING: ContextVar[bool] = ContextVar("cache_refreshing", default=False)


@contextlib.contextmanager
def refreshing() -> Iterator[None]:
    """Make the bulk loads inside (`load_many`, `load_values`) refresh, not fill.

    Inside, `reserve` holds the keys that are resident (each reloaded with a
    fresh deadline, counted as `refreshes`) and skips the absent ones: a
    refresh keeps warm what a cache holds and adds nothing (an emergency
    clear stays cleared). Every guarantee of a bulk load holds: a key
    invalidated, set or cleared while the call runs keeps its newer state.
    """
    token = _REFRESHING.set(True)
    try:
        yield
    finally:
        _REFRESHING.reset(token)


class BoundedTTLCache(ExpiringStore[K, V]):
    """A bounded map with per-entry deadlines, single-flight loads and stats."""

    last_invalidation: float | None  # set by reset_stats

    def __init__(
        self,
        name: str,
        *,
        maxsize: int,
        ttl: float | None = None,
        clock: Clock = time.monotonic,
        scopes: Mapping[str, ScopeSpec] | None = None,
    ) -> None:
        super().__init__(name, maxsize=maxsize, ttl=ttl, clock=clock, scopes=scopes)
        self._loads: SingleFlight[K, Any] = SingleFlight(f"cache-load:{name}")
        # The loads' live map, for one truth test on the write path.
        self._inflight = self._loads.flights
        self.reset_stats()

    # ----------------------------------------------------------- reads

    @overload
    def get(self, key: K) -> V | Missing: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: Any = MISSING) -> Any:
        """Return the live value for `key`, or `default` on a miss."""
        # Hot path: nothing has expired yet, so the dict answers alone.
        if self._now() < self._front_deadline:
            value = self._data.get(key, MISSING)
            if value is not MISSING:
                self.hits += 1
                return value
            self.misses += 1
            return default
        return self._get_after_expiry(key, default)

    def _get_after_expiry(self, key: K, default: Any) -> Any:
        self._expire_due()
        value = self._data.get(key, MISSING)
        if value is MISSING:
            self.misses += 1
            return default
        self.hits += 1
        return value

    # ----------------------------------------------------------- writes

    def set(self, key: K, value: V, ttl: float | None = None) -> None:
        """Store `value` under `key`, staling any load of `key` still running."""
        # Hot path: with no load in flight, one truth test and the store's set.
        if self._inflight:
            self._loads.detach(key)
        ExpiringStore.set(self, key, value, ttl)

    # ----------------------------------------------------------- loading

    async def get_or_load(
        self, key: K, loader: Loader[V], *, ttl: float | None = None
    ) -> V:
        """Return the value for `key`, running `loader` once for concurrent misses.

        A loader error reaches every waiter and nothing is cached. A
        `DoNotCache(value)` result reaches every waiter and is not stored,
        and neither is a result whose key was set or invalidated during the
        load.
        """
        if self._now() < self._front_deadline:
            value = self._data.get(key, MISSING)
            if value is not MISSING:
                self.hits += 1
                return value
        value = self._get_after_expiry(key, MISSING)
        if value is not MISSING:
            return value
        loop = asyncio.get_running_loop()
        flight = self._loads.joinable(key, loop)
        if flight is None:
            self.loads += 1
            flight = self._loads.start(
                key, lambda flight: self._run_load(key, loader, ttl, flight), loop
            )
        # shield: a cancelled waiter must not cancel the load the others share.
        return await asyncio.shield(flight.task)  # type: ignore[arg-type]

    async def _run_load(
        self, key: K, loader: Loader[V], ttl: float | None, flight: Flight[Any]
    ) -> V:
        try:
            result = await loader()
        except Exception:
            self.load_failures += 1
            raise
        if isinstance(result, DoNotCache):
            return result.value  # type: ignore[no-any-return]
        if not flight.stale:
            # The store's own set: a later load of this key (started on another
            # loop) is not older than this one, so it must not be staled.
            ExpiringStore.set(self, key, result, ttl)
        return result

    def reserve(self, keys: Iterable[K]) -> dict[K, Flight[Any]]:
        """Hold a flight for each of `keys` not resident nor loading, as room allows.

        The first half of a load of many keys by one call (`load_many`): the
        keys are held before the call starts, so an invalidation, a `set` or
        a `clear` of one while it runs detaches its flight exactly as it
        would a `get_or_load`'s, and `fill` stores nothing for that key. A
        held flight has no task: nobody joins it, and a `get_or_load` of the
        key meanwhile runs a load of its own, which owns the key. Keys past
        the room left under the cap are not held: a bulk load never evicts.
        Inside `refreshing()` it is the other way round: only resident keys
        are held (no room is needed to store over them).
        """
        held: dict[K, Flight[Any]] = {}
        if _REFRESHING.get():
            self._expire_due()
            data, hold = self._data, self._loads.hold
            for key in keys:
                if key in data:
                    flight = hold(key)
                    if flight is not None:
                        held[key] = flight
            return held
        room = self.maxsize - len(self)
        for key in keys:
            if len(held) >= room:
                break
            if key in self._data:
                continue
            flight = self._loads.hold(key)
            if flight is not None:
                held[key] = flight
        return held

    def fill(
        self,
        held: Mapping[K, Flight[Any]],
        values: Mapping[K, V],
        *,
        ttl: float | None = None,
    ) -> dict[K, V]:
        """Store the value of each held key whose flight is still current; return them.

        Every held flight is let go; a key `values` lacks is not stored (the
        layer would not cache it), nor is one detached or loaded anew meanwhile.
        """
        stored: dict[K, V] = {}
        # A refresh stores over resident keys only: one that expired or was
        # evicted meanwhile is not brought back (and evicts nothing).
        refresh, data = _REFRESHING.get(), self._data
        for key, flight in held.items():
            if not self._loads.release(key, flight) or key not in values:
                continue
            if refresh and key not in data:
                continue
            value = values[key]
            ExpiringStore.set(self, key, value, ttl)
            stored[key] = value
        return stored

    def release(self, held: Mapping[K, Flight[Any]]) -> None:
        """Let go of held flights without storing anything (the call failed)."""
        for key, flight in held.items():
            self._loads.release(key, flight)

    async def load_values(
        self,
        keys: Iterable[K],
        loader: Callable[[list[K]], Awaitable[Mapping[K, V]]],
        *,
        ttl: float | None = None,
    ) -> dict[K, V]:
        """`load_many`, returning the entries stored instead of their count."""
        held = self.reserve(keys)
        if not held:
            return {}
        if _REFRESHING.get():
            self.refreshes += len(held)
        else:
            self.loads += len(held)
        try:
            values = await loader(list(held))
        except BaseException as exc:
            self.release(held)
            if isinstance(exc, Exception):
                self.load_failures += 1
            raise
        return self.fill(held, values, ttl=ttl)

    async def load_many(
        self,
        keys: Iterable[K],
        loader: Callable[[list[K]], Awaitable[Mapping[K, V]]],
        *,
        ttl: float | None = None,
    ) -> int:
        """Load every key that is neither resident nor loading in one `loader` call.

        `loader(keys)` returns a value for each key it was given (a key it
        leaves out is not stored). What a single load promises holds for
        each key: one set, invalidated or cleared while the call runs is
        not stored, and one a concurrent `get_or_load` is loading is not
        asked for (nor is a bulk-loaded key joinable: such a caller runs its
        own load, and the newer of the two is the one kept). Only the room
        left under the cap is loaded: nothing is evicted for it. A loader
        error propagates and nothing is stored. Returns the entries stored.
        """
        return len(await self.load_values(keys, loader, ttl=ttl))

    def _detach_flights(self, keys: Iterable[K]) -> int:
        # Later callers start a fresh load instead of joining a stale one.
        return self._loads.detach_many(keys)

    # ----------------------------------------------------------- removal

    def invalidate(self, key: K) -> int:
        """Drop `key` and stale its in-flight load; return entries removed."""
        self._expire_due()
        removed = 0
        if key in self._data:
            self._remove(key)
            removed = 1
        staled = self._detach_flights([key] if key in self._inflight else [])
        self._note_invalidation(removed, staled)
        return removed

    def invalidate_where(self, predicate: Callable[[K], bool]) -> int:
        """Drop every key matching `predicate`; return entries removed."""
        self._expire_due()
        matched = [key for key in self._data if predicate(key)]
        for key in matched:
            self._remove(key)
        staled = self._detach_flights(k for k in self._inflight if predicate(k))
        self._note_invalidation(len(matched), staled)
        return len(matched)

    def invalidate_scope(self, scope: str, value: Hashable) -> int:
        """Drop every key of scope `scope` = `value` (through its index); return removals."""
        self._expire_due()
        matched = self._remove_scope(scope, value)
        self._note_invalidation(len(matched), self._detach_scope(scope, {value}))
        return len(matched)

    def invalidate_scope_values(self, scope: str, values: Iterable[Hashable]) -> int:
        """Drop every key of any of `values` of key scope `scope`, in one pass; return removals."""
        self._expire_due()
        wanted = set(values)
        matched = self._remove_scope_values(scope, wanted)
        self._note_invalidation(len(matched), self._detach_scope(scope, wanted))
        return len(matched)

    def detach_scope_loads(self, scope: str, value: Hashable) -> int:
        """Stale every in-flight load of a key in scope `scope` = `value`; return how many."""
        return self._detach_scope(scope, {value})

    def _detach_scope(self, scope: str, values: AbstractSet[Hashable]) -> int:
        # The in-flight loads of keys under any of `values`, in one pass.
        if not self._inflight:
            return 0
        fn = self.scope_values(scope)
        return self._detach_flights(
            k for k in self._inflight if not values.isdisjoint(fn(k))
        )

    def invalidate_prefix(self, prefix: str) -> int:
        """Drop every string key starting with `prefix`; return entries removed."""
        return self.invalidate_where(
            lambda key: isinstance(key, str) and key.startswith(prefix)
        )

    def clear(self) -> int:
        """Drop every entry and stale every in-flight load; return entries removed."""
        removed = self._clear_entries()
        staled = self._detach_flights(self._inflight)
        self._note_invalidation(removed, staled)
        return removed

    def _note_invalidation(self, removed: int, staled: int) -> None:
        self.invalidations += removed
        if removed or staled:
            self.last_invalidation = time.time()

    # ----------------------------------------------------------- stats

    def reset_stats(self) -> None:
        """Zero every counter (tests)."""
        self.hits = 0
        self.misses = 0
        self.loads = 0
        self.refreshes = 0  # resident keys reloaded ahead of expiry (refreshing())
        self.load_failures = 0
        self.evictions = 0
        self.expirations = 0
        self.invalidations = 0
        self.last_invalidation = None

    def stats(self) -> dict[str, Any]:
        """Return this cache's counters, resident size, cap and ttl.

        `size` is resident entries: it does not drop expired ones first, so
        it reads without side effects and shows what memory actually holds.
        """
        return {
            "name": self.name,
            "hits": self.hits,
            "misses": self.misses,
            "loads": self.loads,
            "refreshes": self.refreshes,
            "load_failures": self.load_failures,
            "evictions": self.evictions,
            "expirations": self.expirations,
            "invalidations": self.invalidations,
            "size": len(self._data),
            "cap": self.maxsize,
            "ttl": self.ttl,
            "in_flight": len(self._inflight),
            "last_invalidation": self.last_invalidation,
        }

    def __repr__(self) -> str:
        return (
            f"<BoundedTTLCache {self.name!r} size={len(self._data)}"
            f" cap={self.maxsize} ttl={self.ttl}>"
        )
