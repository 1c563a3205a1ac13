"""Helpers shared by the cache layers: settings, composite caches, key parsers, threads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from caches.core import (
    MISSING,
    BoundedTTLCache,
    Clock,
    DoNotCache,
    Loader,
    current_flight,
)
from caches.database import run_db as run_db  # the layers import it from here
from caches.turn_notes import note_miss
from tomori.domain.knobs import KNOBS_BY_NAME, knobs
from tomori.domain.models.validation import parse_snowflake


def knob(name: str) -> Any:
    """Return knob `name`: the domain's typed settings, or a layer's own knob."""
    if name in KNOBS_BY_NAME:
        return getattr(knobs(), name)
    from caches.layers import _knobs

    return _knobs.read(_knobs.own_knobs()[name])


def unwrapped(result: Any) -> Any:
    """Return a loader's result as a value (a `DoNotCache` wrapper removed)."""
    return result.value if isinstance(result, DoNotCache) else result


def parse_int(text: str) -> int:
    """Parse one operator-typed id (a snowflake or a primary key): ASCII 1..2^63-1."""
    return parse_snowflake(text)


def cached(cache: BoundedTTLCache[Any, Any], key: Any) -> Any:
    """Return the live value of `key` (counted as a hit), or MISSING (not counted).

    The hit path of a read-through layer: a hit returns before any loader
    closure is built. On MISSING the caller must go on to `get_or_load`, which
    counts the miss itself, so the miss is not counted twice.
    """
    value = cache.get(key)
    if value is MISSING:
        cache.misses -= 1  # get_or_load, which the caller runs next, counts it
        note_miss(cache.name)
    return value


async def warm_map(
    cache: BoundedTTLCache[Any, Any] | StaleFallbackCache,
    keys: Iterable[Any],
    load_of: Callable[[list[Any]], Mapping[Any, Any]],
) -> int:
    """Warm `cache` with one bulk read `load_of(keys)` in the database thread.

    What the read leaves out is not stored (the layer would not cache it);
    return how many entries were stored (`BoundedTTLCache.load_many`).
    """
    return await cache.load_many(keys, lambda held: run_db(load_of, held))


def parse_int_pair(text: str) -> tuple[int, int]:
    """Parse "a:b" into (a, b), each an id as `parse_int` takes it."""
    parts = text.strip().split(":")
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not two ids separated by ':'")
    return parse_int(parts[0]), parse_int(parts[1])


class CompositeCache:
    """Several BoundedTTLCaches registered as one layer (a primary map plus helpers).

    The registry sees one cache, and every registry-facing call covers every
    member map: `len`, `clear`, `invalidate` and `stats()["size"]` count the
    entries of all of them (a helper map's entries take memory like the
    primary's), and clearing, sweeping and clock swaps reach each one. Reads
    (`keys`, `items`, `peek`, `in`) are the primary map's.
    """

    def __init__(
        self, primary: BoundedTTLCache[Any, Any], **members: BoundedTTLCache[Any, Any]
    ) -> None:
        self.primary = primary
        self.members = members
        self.name = primary.name
        self._maps: dict[str, BoundedTTLCache[Any, Any]] = {
            "primary": primary,
            **members,
        }

    def maps(self) -> dict[str, BoundedTTLCache[Any, Any]]:
        """Return every member map by label, the primary first (as "primary")."""
        return dict(self._maps)

    def __len__(self) -> int:
        return sum(len(cache) for cache in self._maps.values())

    def __contains__(self, key: object) -> bool:
        return key in self.primary

    def keys(self) -> list[Any]:
        """Return the primary map's live keys."""
        return self.primary.keys()

    def items(self) -> list[tuple[Any, Any]]:
        """Return the primary map's live (key, value) pairs."""
        return self.primary.items()

    def peek(self, key: Any, default: Any = MISSING) -> Any:
        """Return the primary map's live value for `key` without counting it."""
        return self.primary.peek(key, default)

    def invalidate(self, key: Any) -> int:
        """Drop `key` from every member; return the entries removed from all."""
        return sum(cache.invalidate(key) for cache in self._maps.values())

    def clear(self) -> int:
        """Drop every entry of every member; return the entries removed from all."""
        return sum(cache.clear() for cache in self._maps.values())

    def clear_expired(self) -> int:
        """Sweep expired entries of every member; return how many were dropped."""
        return sum(cache.clear_expired() for cache in self._maps.values())

    def set_clock(self, clock: Clock) -> None:
        """Make every member read time from `clock`."""
        for cache in self._maps.values():
            cache.set_clock(clock)

    def stats(self) -> dict[str, Any]:
        """Return the layer's stats: the primary's, with entry counts over all members.

        `size`, `cap`, `evictions`, `expirations`, `invalidations` and the load
        counters are summed over the members, `members` and `member_caps`
        break size and cap down by label; `hits` and `misses` stay the
        primary's, since one layer read may consult several members.
        """
        per = {label: cache.stats() for label, cache in self._maps.items()}
        stats = dict(per["primary"])
        for field in _SUMMED_STATS:
            stats[field] = sum(s[field] for s in per.values())
        stats["members"] = {label: s["size"] for label, s in per.items()}
        stats["member_caps"] = {label: s["cap"] for label, s in per.items()}
        stamps = [s["last_invalidation"] for s in per.values()]
        stats["last_invalidation"] = max(
            (t for t in stamps if t is not None), default=None
        )
        return stats


class GatedCache(CompositeCache):
    """A layer's per-key map (primary) and its per-server map (`gate`), as one cache.

    The keys of the two never collide (a server's is an int, the per-key
    map's a tuple), so `keys()`, `peek()` and `in` cover both: the
    consistency watcher samples a server's gate as it samples any entry, and
    an operator drops either by typing its key.
    """

    def __init__(
        self, primary: BoundedTTLCache[Any, Any], gate: BoundedTTLCache[Any, Any]
    ) -> None:
        super().__init__(primary, gate=gate)
        self.gate = gate

    def _holder(self, key: Any) -> BoundedTTLCache[Any, Any]:
        return self.gate if isinstance(key, int) else self.primary

    def __contains__(self, key: object) -> bool:
        return key in self._holder(key)

    def keys(self) -> list[Any]:
        """Return the live keys of both maps."""
        return [*self.primary.keys(), *self.gate.keys()]

    def items(self) -> list[tuple[Any, Any]]:
        """Return the live (key, value) pairs of both maps."""
        return [*self.primary.items(), *self.gate.items()]

    def peek(self, key: Any, default: Any = MISSING) -> Any:
        """Return the live value of `key` in the map holding its kind, uncounted."""
        return self._holder(key).peek(key, default)


def parse_gate_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Return a key parser taking "server_id" (a gate) or what `parse` takes."""

    def parse_key(text: str) -> Any:
        if ":" not in text:
            return parse_int(text)
        return parse(text)

    return parse_key


_SUMMED_STATS = (
    "size",
    "cap",
    "evictions",
    "expirations",
    "invalidations",
    "loads",
    "load_failures",
    "in_flight",
)


class StaleFallbackCache(CompositeCache):
    """A TTL cache that also keeps each key's last good value for a while.

    The core drops an entry when its TTL passes, but a layer whose reload can
    fail (the database is down) wants to keep serving what it last knew. The
    `last_good` member holds those values for `retention` seconds.

    An invalidation drops the fresh value, so the next read must try the
    database first (a save shows as soon as the database answers); the last
    good value stays, and is served (`fallback`, counted as stale) only when
    that reload fails, until a reload succeeds. A load whose key is
    invalidated, or the cache cleared, while it runs is remembered by neither
    map (its value may predate the change), and a successful load the layer
    does not cache (`DoNotCache`) drops the kept value: the database has
    answered, and the old value is no longer the last good one. `clear()`
    drops every member (the operator and emergency clears free memory).
    """

    def __init__(
        self,
        fresh: BoundedTTLCache[Any, Any],
        *,
        retention: float,
        **members: BoundedTTLCache[Any, Any],
    ) -> None:
        last_good: BoundedTTLCache[Any, Any] = BoundedTTLCache(
            f"{fresh.name}:last_good",
            maxsize=fresh.maxsize,
            ttl=retention,
            clock=fresh.clock,
        )
        super().__init__(fresh, last_good=last_good, **members)
        self.last_good = last_good
        # Keys served from last_good since their last successful load.
        self._served_stale: set[Any] = set()

    def get(self, key: Any, default: Any = MISSING) -> Any:
        """Return the fresh value for `key`, or `default`."""
        return self.primary.get(key, default)

    async def get_or_load(self, key: Any, loader: Loader[Any]) -> Any:
        """Return the fresh value, loading once on a miss and remembering it as good."""
        value = cached(self.primary, key)
        if value is not MISSING:
            return value
        return await self.primary.get_or_load(key, self._remembering(key, loader))

    def _remembering(self, key: Any, loader: Loader[Any]) -> Loader[Any]:
        async def load_and_remember() -> Any:
            value = await loader()
            # This runs inside the core's load of `key` (its single flight),
            # which every invalidation or clear of the key stales. No await
            # between here and the core's own store: both see the same ones.
            flight = current_flight()
            if flight is None or not flight.stale:
                self._remember(key, value)
            return value

        return load_and_remember

    def _remember(self, key: Any, value: Any) -> None:
        self._served_stale.discard(key)
        if isinstance(value, DoNotCache):
            self.last_good.invalidate(key)
        else:
            self.last_good.set(key, value)

    async def load_many(
        self,
        keys: Iterable[Any],
        loader: Callable[[list[Any]], Awaitable[Mapping[Any, Any]]],
    ) -> int:
        """Load many keys by one call (a warm-up), each stored one remembered as good."""
        stored = await self.primary.load_values(keys, loader)
        for key, value in stored.items():
            self._remember(key, value)
        return len(stored)

    def stale(self, key: Any) -> Any:
        """Return the last good value of `key` (MISSING if none is kept)."""
        return self.last_good.peek(key)

    def fallback(self, key: Any) -> Any:
        """Return the last good value to serve after a failed reload (counted stale)."""
        value = self.last_good.peek(key)
        if value is not MISSING:
            if len(self._served_stale) >= self.last_good.maxsize:
                self.stale_entries()  # forget keys last_good no longer holds
            self._served_stale.add(key)
        return value

    def stale_entries(self) -> int:
        """Return how many keys are served from their last good value right now."""
        gone = [key for key in self._served_stale if key not in self.last_good]
        self._served_stale.difference_update(gone)
        return len(self._served_stale)

    def invalidate(self, key: Any) -> int:
        """Drop `key` from every member but last_good; return the entries removed.

        The last good value stays to answer a reload that fails; the key's
        running load is not remembered (it may predate the change).
        """
        return sum(
            cache.invalidate(key)
            for cache in self._maps.values()
            if cache is not self.last_good
        )

    def clear(self) -> int:
        """Drop every entry of every member and keep running loads from being remembered."""
        self._served_stale.clear()
        return super().clear()

    def stats(self) -> dict[str, Any]:
        """Return the layer's stats (see CompositeCache) with `stale_entries`."""
        stats = super().stats()
        stats["stale_entries"] = self.stale_entries()
        return stats
