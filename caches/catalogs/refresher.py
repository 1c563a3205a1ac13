"""The refresh machine shared by the four OpenRouter catalogs (spec section 7).

A catalog is a map from normalised codename to an immutable entry. A refresh
builds a whole new map and swaps it in only on success, so a failed refresh
leaves the previous catalog serving. Concurrent refreshes share one request
(single flight), attempts are rate-limited, and synchronous readers never reach
the network. Everything runs on one event loop; nothing here is thread-safe.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic

from caches.catalogs.entries import normalize_codename
from caches.catalogs.fetch import (
    DEFAULT_TIMEOUT,
    CatalogFetchError,
    E,
    build_entries,
    fetch_models_payload,
)
from caches.catalogs.httpx_client import httpx
from caches.catalogs.outcomes import RATE_LIMITED, RefreshOutcome, format_age
from caches.core import Flight, SingleFlight

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
# Called after each successful network fetch with the raw `data` list; may be
# sync or async. Not called for load_snapshot (the snapshot came from storage).
OnRefreshed = Callable[[str, list[Any]], object]

DEFAULT_TTL_SECONDS = 6 * 60 * 60.0
DEFAULT_MIN_INTERVAL_SECONDS = 60.0


class CatalogRefresher(Generic[E]):
    """One OpenRouter catalog: lookups, single-flight rate-limited refresh, TTL, status."""

    def __init__(
        self,
        name: str,
        *,
        url: str,
        parse_entry: Callable[[object], E | None],
        client: httpx.AsyncClient,
        api_key: str | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        ttl: float = DEFAULT_TTL_SECONDS,
        min_interval: float = DEFAULT_MIN_INTERVAL_SECONDS,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        on_refreshed: OnRefreshed | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self.ttl = ttl
        self.min_interval = min_interval
        self.on_refreshed = on_refreshed
        self._parse_entry = parse_entry
        self._client = client
        self._api_key = api_key
        self._timeout = timeout
        self._clock = clock
        self._wall_clock = wall_clock
        self._entries: dict[str, E] = {}
        self._refreshes: SingleFlight[None, bool] = SingleFlight(
            f"catalog-refresh-{name}"
        )
        self._success_at: float | None = None  # monotonic, drives the TTL
        self._fetched_at: float | None = None  # wall clock of the serving snapshot
        self._attempt_at: float | None = None  # monotonic, drives the rate limit
        self._attempt_wall: float | None = None
        self._last_error: str | None = None
        self._hits = self._misses = self._fetches = self._failures = 0
        self._invalidations = 0

    # Synchronous reads: never the network.

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, codename: str) -> E | None:
        """Return the entry for `codename` from the serving catalog, or None."""
        entry = self._entries.get(normalize_codename(codename))
        if entry is None:
            self._misses += 1
        else:
            self._hits += 1
        return entry

    def entries(self) -> Mapping[str, E]:
        """Return a read-only view of the serving catalog, keyed by normalised codename."""
        return MappingProxyType(self._entries)

    def is_ready(self) -> bool:
        """Return whether a usable snapshot is serving (says nothing of any one model)."""
        return bool(self._entries)

    def is_stale(self, now: float | None = None) -> bool:
        """Return whether the catalog is missing or older than the TTL at monotonic `now`."""
        if self._success_at is None:
            return True
        now = self._clock() if now is None else now
        return now - self._success_at >= self.ttl

    # Asynchronous reads and refreshes.

    async def get_or_fetch(self, codename: str, *, fresh: bool = False) -> E | None:
        """Return the entry for `codename`, refreshing on a miss (rate-limited).

        `fresh=True` refreshes before the lookup and ignores the rate limit, for
        interactive model registration of a codename published minutes ago.
        """
        key = normalize_codename(codename)
        if not key:
            return None
        if fresh:
            await self.refresh(force=True)
            return self._entries.get(key)
        entry = self.get(key)
        if entry is None:
            await self.refresh()
            entry = self._entries.get(key)
        return entry

    async def refresh(self, *, force: bool = False) -> bool:
        """Refresh from the network, joining one in flight; return whether it succeeded.

        Without `force`, an attempt within `min_interval` of the previous one
        (successful or not) is skipped and returns False.
        """
        return (await self.refresh_with_reason(force=force)).refreshed

    async def refresh_with_reason(self, *, force: bool = False) -> RefreshOutcome:
        """Refresh as `refresh` does; say why when the catalog was not replaced."""
        flight = self._refreshes.joinable(None)
        if flight is None:
            if not force and self._rate_limited():
                return RefreshOutcome(False, self._rate_limit_reason())
            flight = self._start_refresh()
        # A caller that is cancelled does not cancel the shared fetch.
        if await flight.wait():
            return RefreshOutcome(True)
        return RefreshOutcome(False, self._last_error or "the refresh failed")

    async def refresh_if_stale(self) -> bool:
        """Refresh (rate-limited) when the TTL has run out; return whether one succeeded."""
        if not self.is_stale():
            return False
        return await self.refresh()

    def load_snapshot(self, payload_models: list[Any], fetched_at: float) -> bool:
        """Serve a stored snapshot (raw `data` list, wall-clock `fetched_at`) without the network.

        Refuse (return False) a snapshot older than the one serving or holding no
        usable model.
        """
        if self._fetched_at is not None and fetched_at < self._fetched_at:
            return False
        try:
            entries = build_entries(payload_models, self._parse_entry)
        except CatalogFetchError as exc:
            logger.warning("catalog %s: snapshot refused: %s", self.name, exc)
            return False
        age = max(0.0, self._wall_clock() - fetched_at)
        self._install(entries, fetched_at=fetched_at, success_at=self._clock() - age)
        return True

    # Registry protocol (policy preserve: the emergency clear skips catalogs).

    def clear(self) -> int:
        """Drop every entry and the rate limit, so the next miss fetches; return the count."""
        dropped = len(self._entries)
        self._entries = {}
        self._success_at = self._fetched_at = self._attempt_at = None
        return dropped

    def invalidate(self, key: str) -> int:
        """Drop one codename (the next lookup of it misses); return 1 if it was held."""
        removed = self._entries.pop(normalize_codename(key), None) is not None
        self._invalidations += removed
        return int(removed)

    def clear_expired(self) -> int:
        """Return 0: catalog entries never expire one by one; the whole map is replaced."""
        return 0

    def set_clock(self, clock: Clock) -> None:
        """Use another monotonic clock, keeping the ages of the TTL and rate limit."""
        shift = clock() - self._clock()
        if self._success_at is not None:
            self._success_at += shift
        if self._attempt_at is not None:
            self._attempt_at += shift
        self._clock = clock

    def maps(self) -> dict[str, Any]:
        """Return no core map: the catalog is a plain dict, replaced whole on refresh."""
        return {}

    def stats(self) -> dict[str, Any]:
        """Return counters in the shape the cache core reports."""
        return {
            "size": len(self._entries),
            "cap": None,
            "hits": self._hits,
            "misses": self._misses,
            "loads": self._fetches,
            "load_failures": self._failures,
            "evictions": 0,
            "expirations": 0,
            "invalidations": self._invalidations,
        }

    def status(self) -> dict[str, Any]:
        """Return the catalog's health: size, readiness, wall-clock times, last error."""
        return {
            "name": self.name,
            "size": len(self._entries),
            "ready": self.is_ready(),
            "last_success": self._fetched_at,
            "last_attempt": self._attempt_wall,
            "last_error": self._last_error,
            "stale": self.is_stale(),
            "refreshing": bool(self._refreshes),
            "fetches": self._fetches,
            "failures": self._failures,
        }

    # Internals.

    def _rate_limited(self) -> bool:
        if self._attempt_at is None:
            return False
        return self._clock() - self._attempt_at < self.min_interval

    def _rate_limit_reason(self) -> str:
        assert self._attempt_at is not None  # rate-limited: an attempt was made
        age = format_age(self._clock() - self._attempt_at)
        if self._last_error is None:
            return f"{RATE_LIMITED}, last refresh {age} ago"
        return f"{RATE_LIMITED}, last attempt {age} ago failed: {self._last_error}"

    def _start_refresh(self) -> Flight[bool]:
        self._attempt_at = self._clock()
        self._attempt_wall = self._wall_clock()
        return self._refreshes.start(None, lambda _flight: self._fetch_and_install())

    async def _fetch_and_install(self) -> bool:
        self._fetches += 1
        try:
            data = await fetch_models_payload(
                self._client, self.url, api_key=self._api_key, timeout=self._timeout
            )
            entries = build_entries(data, self._parse_entry)
        except CatalogFetchError as exc:
            self._record_failure(str(exc))
            return False
        except Exception as exc:  # a parser bug must not take lookups down
            logger.exception("catalog %s: unexpected refresh error", self.name)
            self._record_failure(f"unexpected error: {exc!r}")
            return False
        self._install(entries, fetched_at=self._wall_clock(), success_at=self._clock())
        await self._announce(data)
        return True

    def _install(
        self, entries: dict[str, E], *, fetched_at: float, success_at: float
    ) -> None:
        previous = self._entries
        self._entries = entries
        self._fetched_at = fetched_at
        self._success_at = success_at
        self._last_error = None
        # A line when what is served changes: a refresh or a snapshot reload
        # that brings the same models says nothing (workers reload every minute).
        if entries == previous:
            return
        was = f" (was {len(previous)})" if previous else ""
        models = "model" if len(entries) == 1 else "models"
        logger.info("catalog %s: serving %d %s%s", self.name, len(entries), models, was)

    def _record_failure(self, reason: str) -> None:
        self._failures += 1
        self._last_error = reason
        logger.warning(
            "catalog %s: refresh failed, previous catalog kept: %s", self.name, reason
        )

    async def _announce(self, data: list[Any]) -> None:
        if self.on_refreshed is None:
            return
        try:
            result = self.on_refreshed(self.name, data)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("catalog %s: on_refreshed callback failed", self.name)
