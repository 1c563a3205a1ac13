"""Helpers shared by the cache layers: settings-driven caches, key parsers, threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings

from caches.core import MISSING, BoundedTTLCache, Clock, DoNotCache, Loader

P = ParamSpec("P")
R = TypeVar("R")


def knob(name: str) -> Any:
    """Return the operational setting `name` (see tomori/knobs.py)."""
    return getattr(settings, name)


def minutes_setting(name: str) -> float:
    """Return the TTL setting `name` (minutes) in seconds."""
    return float(knob(name)) * 60.0


def sweep_interval() -> float:
    """Return CACHE_SWEEP_INTERVAL_SECONDS."""
    return float(knob("CACHE_SWEEP_INTERVAL_SECONDS"))


def new_cache(
    name: str, *, cap_setting: str, ttl: float | None
) -> BoundedTTLCache[Any, Any]:
    """Build a layer's cache with its cap setting, `ttl` seconds and the sweep interval."""
    return BoundedTTLCache(
        name,
        maxsize=int(knob(cap_setting)),
        ttl=ttl,
        sweep_interval=sweep_interval(),
    )


async def run_db(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a sync repository function in Django's database thread."""
    return await sync_to_async(fn)(*args, **kwargs)


def parse_int(text: str) -> int:
    """Parse one operator-typed integer id (a snowflake or a primary key)."""
    text = text.strip()
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer id") from None
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return value


def parse_int_pair(text: str) -> tuple[int, int]:
    """Parse "a:b" into (a, b)."""
    parts = text.strip().split(":")
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not two ids separated by ':'")
    return parse_int(parts[0]), parse_int(parts[1])


class CompositeCache:
    """Several BoundedTTLCaches registered as one layer (a primary map plus helpers).

    The registry sees one cache: clearing, sweeping and clock swaps reach every
    member, while size, keys and stats are the primary's (plus member sizes).
    """

    def __init__(
        self, primary: BoundedTTLCache[Any, Any], **members: BoundedTTLCache[Any, Any]
    ) -> None:
        self.primary = primary
        self.members = members
        self.name = primary.name

    def _all(self) -> list[BoundedTTLCache[Any, Any]]:
        return [self.primary, *self.members.values()]

    def __len__(self) -> int:
        return len(self.primary)

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
        """Drop `key` from every member; return the primary's removals."""
        removed = self.primary.invalidate(key)
        for member in self.members.values():
            member.invalidate(key)
        return removed

    def clear(self) -> int:
        """Drop every entry of every member; return the primary's removals."""
        removed = self.primary.clear()
        for member in self.members.values():
            member.clear()
        return removed

    def clear_expired(self) -> int:
        """Sweep expired entries of every member; return how many were dropped."""
        return sum(cache.clear_expired() for cache in self._all())

    def set_clock(self, clock: Clock) -> None:
        """Make every member read time from `clock`."""
        for cache in self._all():
            cache.set_clock(clock)

    def stats(self) -> dict[str, Any]:
        """Return the primary's stats plus each member's size and cap."""
        stats = self.primary.stats()
        for label, member in self.members.items():
            stats[f"{label}_size"] = len(member)
            stats[f"{label}_cap"] = member.maxsize
        return stats


class StaleFallbackCache(CompositeCache):
    """A TTL cache that also keeps each key's last good value for a while.

    The core drops an entry when its TTL passes, but a layer whose reload can
    fail (the database is down) wants to keep serving what it last knew. The
    `last_good` member holds those values for `retention` seconds; an
    invalidation or a clear drops them with the fresh entry, so only values
    nobody has declared wrong are ever served stale.
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
            sweep_interval=fresh.sweep_interval,
            clock=fresh.clock,
        )
        super().__init__(fresh, last_good=last_good, **members)
        self.last_good = last_good

    def get(self, key: Any, default: Any = MISSING) -> Any:
        """Return the fresh value for `key`, or `default`."""
        return self.primary.get(key, default)

    async def get_or_load(self, key: Any, loader: Loader[Any]) -> Any:
        """Return the fresh value, loading once on a miss and remembering it as good."""

        async def load_and_remember() -> Any:
            value = await loader()
            if not isinstance(value, DoNotCache):
                self.last_good.set(key, value)
            return value

        return await self.primary.get_or_load(key, load_and_remember)

    def stale(self, key: Any) -> Any:
        """Return the last good value of `key` (MISSING if none is kept)."""
        return self.last_good.peek(key)
