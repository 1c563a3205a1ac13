"""Loading short-term memory's durable fields back into the cache after a restart.

A read miss loads its key (one query, shared by concurrent misses); the first
listing of a server or user loads that whole scope (one query). Hydration
never overwrites what a live write put in the cache meanwhile, and a clear
during a hydration drops its result: every live write or clear `touch`es the
key, which marks the in-flight loads that could bring back older state.
Queued (not yet applied) durable writes are laid over what the table said.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from caches.core import MISSING, BoundedTTLCache, Flight, SingleFlight
from caches.core.clock import utc_now
from caches.layers._support import run_db
from caches.layers.short_term_memory.durable import DurableWriter
from caches.layers.short_term_memory.entry import (
    ShortTermMemoryEntry,
    entry_from_durable,
)
from caches.layers.short_term_memory.keys import SERVER, USER, key_owner
from caches.layers.short_term_memory.stored_keys import StoredKeys
from tomori.domain.knobs import knobs
from tomori.domain.repositories import memory as repo
from tomori.domain.repositories.memory import DurableMemory

Scope = tuple[str, int]
# Hydrated entries keep their remaining lifetime, floored to 1/15 of the full
# ttl: two ttl classes x 15 steps stay within the core's 32 exact ttl queues.
_TTL_STEPS = 15


def crude_ttl() -> float:
    """Return the ttl in seconds of an entry without a summary."""
    return knobs().SHORT_TERM_MEMORY_TTL_HOURS * 3600.0


def summary_ttl() -> float:
    """Return the ttl in seconds of an entry with a summary."""
    return knobs().SHORT_TERM_MEMORY_SUMMARY_TTL_HOURS * 3600.0


def remaining_ttl(record: DurableMemory, now: datetime) -> float | None:
    """Return how long a hydrated record should live, or None if it has expired."""
    full = summary_ttl() if record.summary else crude_ttl()
    left = full - (now - record.updated_at).total_seconds()
    if left <= 0:
        return None
    step = full / _TTL_STEPS
    floored = math.floor(left / step) * step
    return floored if floored > 0 else left


class Hydrator:
    """Single-flight key and scope loads that yield to live writes."""

    def __init__(
        self,
        cache: BoundedTTLCache[str, ShortTermMemoryEntry | None],
        writer: DurableWriter,
        put: Callable[[ShortTermMemoryEntry, float], None],
        wall_clock: Callable[[], datetime] = utc_now,
        stored: StoredKeys | None = None,
    ) -> None:
        self._cache = cache
        self._writer = writer
        self.stored = stored if stored is not None else StoredKeys()
        self._put = put
        self.wall_clock = wall_clock
        self._keys: SingleFlight[str, None] = SingleFlight("stm-hydrate")
        self._scopes: SingleFlight[Scope, None] = SingleFlight("stm-hydrate")
        self.key_loads = 0
        self.scope_loads = 0

    def window_start(self) -> datetime:
        """Return the oldest write time a row can have and still be hydrated."""
        return self._window_start()

    def _window_start(self) -> datetime:
        return self.wall_clock() - timedelta(seconds=max(crude_ttl(), summary_ttl()))

    # ------------------------------------------------------------ touching

    @property
    def loading(self) -> bool:
        """Tell whether any load runs (none: a write has nothing to touch)."""
        return bool(self._keys.flights or self._scopes.flights)

    def touch(self, key: str) -> None:
        """Note a live write or clear of `key`: in-flight loads must not undo it."""
        # Marked, not detached: a caller that joins it reads the live entry.
        flights = self._keys.flights
        if flights:
            flight = flights.get(key)
            if flight is not None:
                flight.stale = True
        scope_flights = self._scopes.flights
        if scope_flights:
            for scope_flight in scope_flights.values():
                scope_flight.touch(key)

    def touch_where(self, predicate: Callable[[str], bool]) -> None:
        """Note a clear of every key matching `predicate` (and of unseen ones)."""
        for key, flight in self._keys.flights.items():
            if predicate(key):
                flight.stale = True
        for scope_flight in self._scopes.flights.values():
            scope_flight.stale = True

    def touch_all(self) -> None:
        """Note a clear of the whole cache."""
        self.touch_where(lambda key: True)

    # ------------------------------------------------------------ keys

    async def ensure_key(self, key: str) -> ShortTermMemoryEntry | None:
        """Return the cached entry for `key`, loading it from the table on a miss."""
        value = self._cache.get(key)
        if value is not MISSING:
            return value
        if self.stored.absent(key):
            return None  # never stored: nothing to load (the turn stores it next)
        await self._keys.run(key, lambda flight: self._load_key(key, flight))
        value = self._cache.peek(key)
        return None if value is MISSING else value

    async def _load_key(self, key: str, flight: Flight[None]) -> None:
        self.key_loads += 1
        with self._writer.reading():
            record = await run_db(
                repo.get_memory_record, key, updated_since=self._window_start()
            )
            record = self._writer.overlay(key, record)
        if flight.stale:
            return
        # Nothing durable: remember the miss so every message in a quiet
        # channel does not query again.
        if not self._apply(key, record) and self._cache.peek(key) is MISSING:
            self._cache.set(key, None, crude_ttl())

    def _apply(self, key: str, record: DurableMemory | None) -> bool:
        """Cache a hydrated record unless a live entry is there; say if cached."""
        if record is None or isinstance(self._cache.peek(key), ShortTermMemoryEntry):
            return False
        ttl = remaining_ttl(record, self.wall_clock())
        if ttl is None:
            return False
        self._put(entry_from_durable(record), ttl)
        return True

    # ------------------------------------------------------------ scopes

    async def ensure_scope(
        self, scope: str, owner: int, loaded: BoundedTTLCache[Scope, bool]
    ) -> None:
        """Load every record of a user or server once; `loaded` remembers it."""
        name = (scope, owner)
        if loaded.peek(name) is not MISSING:
            return
        load = self._scope_loader(loaded)
        await self._scopes.run(name, lambda flight: load(name, flight))

    def _scope_loader(
        self, loaded: BoundedTTLCache[Scope, bool]
    ) -> Callable[[Scope, Flight[None]], Awaitable[None]]:
        async def load(name: Scope, flight: Flight[None]) -> None:
            scope, owner = name
            self.scope_loads += 1
            lister = (
                repo.list_memory_records_for_user
                if scope == USER
                else repo.list_memory_records_for_server
            )
            with self._writer.reading():
                records = await run_db(
                    lister, owner, updated_since=self._window_start()
                )
                if flight.stale:
                    return  # a clear overlapped: the next listing loads again
                for record in records:
                    if not flight.was_touched(record.cache_key):
                        overlaid = self._writer.overlay(record.cache_key, record)
                        self._apply(record.cache_key, overlaid)
                # A key of the scope queued for the table (evicted from the
                # cache before its write went out) whose row the read did not see yet.
                read = {record.cache_key for record in records}
                for key in self._writer.queued_keys():
                    if key not in read and key_owner(key) == name:
                        read.add(key)
                        if not flight.was_touched(key):
                            self._apply(key, self._writer.overlay(key, None))
            loaded.set((scope, owner), True)

        return load


__all__ = ["SERVER", "USER", "Hydrator", "crude_ttl", "remaining_ttl", "summary_ttl"]
