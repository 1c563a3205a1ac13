"""A consistency watcher, after Meta's Polaris: measure from the outside how often a cache disagrees with the database.

Off the hot path, at a bounded rate (`CONSISTENCY_CHECKS_PER_SECOND`), it
picks a resident entry of a cache that declares a `reload` (the layer's own
read of one key from the database), reads the key afresh and compares. A
mismatch is only a suspect: the database may have changed a moment ago and
its invalidation be on its way. The suspect is checked again once the
staleness bound (`INVALIDATION_STALENESS_BOUND_SECONDS`) has passed; if the
cache still holds the very same value and it still differs from the
database, that is a confirmed inconsistency, and the watcher repairs it: it
drops the key from this worker's cache, so the next read reloads it.

Counting is per episode: one database value the cache failed to reflect.
The first confirmation opens the episode (counted as one inconsistency and
one repair, logged once with the cache, the key, digests of both values, the
age and what was done); a later confirmation of the same key against the same
stored value (a stale fill that raced the drop) is dropped again, silently;
an agreeing check closes the episode. Nines are capped (`NINES_CAP`), so a
perfect record is a finite number in the log, the snapshot and Prometheus.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from caches.core import MISSING, finite_json
from caches.core.periodic import run_periodically
from caches.registry import CacheRegistry, RegisteredCache

logger = logging.getLogger(__name__)

#: Resident keys sampled per cache at a time (a fresh sample when used up).
SAMPLE_SIZE = 64
#: The nines reported for a perfect record, and the most ever reported: finite,
#: so no log line, snapshot or scrape carries Infinity (1e9 checks at 50 per
#: second take 231 days: more nines could not be measured anyway).
NINES_CAP = 9.0
#: Open episodes remembered per cache (the oldest is forgotten first).
MAX_OPEN_EPISODES = 1024
#: Longest key repr in a log line (a key is the cache's own, but bounded anyway).
MAX_LOGGED_KEY = 200


@dataclass
class _Suspect:
    value: Any
    since: float


@dataclass(frozen=True)
class _Episode:
    """One confirmed inconsistency of a key: the stored value the cache missed."""

    stored: str  # digest of the database's value
    since: float


@dataclass
class CacheConsistency:
    """One cache's checks: how many, how many episodes found it inconsistent, repairs."""

    checked: int = 0
    inconsistent: int = 0
    repairs: int = 0
    suspects: dict[Hashable, _Suspect] = field(default_factory=dict)
    episodes: dict[Hashable, _Episode] = field(default_factory=dict)
    sample: list[Hashable] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Return checked, inconsistent, repairs, the consistency ratio and its nines."""
        ratio = 1.0 - self.inconsistent / self.checked if self.checked else None
        return {
            "checked": self.checked,
            "inconsistent": self.inconsistent,
            "repairs": self.repairs,
            "ratio": ratio,
            "nines": nines(ratio),
        }

    def in_episode(self, key: Hashable, stored: str) -> bool:
        """Return whether `key` is already inconsistent with this same stored value."""
        episode = self.episodes.get(key)
        return episode is not None and episode.stored == stored

    def open_episode(self, key: Hashable, stored: str, now: float) -> None:
        """Remember `key`'s episode, forgetting the oldest beyond the bound."""
        self.episodes.pop(key, None)
        self.episodes[key] = _Episode(stored, now)
        while len(self.episodes) > MAX_OPEN_EPISODES:
            del self.episodes[next(iter(self.episodes))]


def nines(ratio: float | None) -> float | None:
    """Return how many nines `ratio` has, at most `NINES_CAP` (0.999 -> 3.0; 1.0 -> 9.0).

    None stays None (nothing checked yet).
    """
    if ratio is None:
        return None
    if ratio >= 1.0:
        return NINES_CAP
    return min(NINES_CAP, -math.log10(1.0 - ratio))


def digest(value: Any) -> str:
    """Return a short stable digest of a value's repr (values never reach the log)."""
    return hashlib.blake2s(repr(value).encode(), digest_size=6).hexdigest()


def short_repr(key: Hashable) -> str:
    """Return `key`'s repr, cut to `MAX_LOGGED_KEY` characters."""
    text = repr(key)
    if len(text) <= MAX_LOGGED_KEY:
        return text
    return f"{text[:MAX_LOGGED_KEY]}... ({len(text):,} characters)"


class ConsistencyWatcher:
    """Compare sampled cache entries with the database, at a bounded rate."""

    def __init__(
        self,
        registry: CacheRegistry,
        *,
        checks_per_second: float,
        bound_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.registry = registry
        self.interval = 1.0 / checks_per_second if checks_per_second > 0 else 0.0
        self.bound = bound_seconds
        self._clock = clock
        self._rng = rng or random.Random()
        self.caches: dict[str, CacheConsistency] = {}
        self._turn = 0

    def watched(self) -> list[RegisteredCache]:
        """Return the registered caches that declare a reload."""
        return [e for e in self.registry.entries() if e.reload is not None]

    async def run(self, stop: asyncio.Event) -> None:
        """Check one entry per interval until `stop` is set (off when the rate is 0)."""
        if not self.interval:
            return
        # A failed check (a database outage) is logged at debug only.
        await run_periodically(
            self.check_next,
            every=self.interval,
            stop=stop,
            name="consistency check",
            failure_level=logging.DEBUG,
        )

    async def check_next(self) -> bool:
        """Check one entry of the next watched cache; return whether one was checked."""
        entries = self.watched()
        for _ in range(len(entries)):
            entry = entries[self._turn % len(entries)]
            self._turn += 1
            if await self.check_cache(entry):
                return True
        return False

    async def check_cache(self, entry: RegisteredCache) -> bool:
        """Check one entry of `entry`'s cache: a due suspect first, else a sampled key."""
        state = self.caches.setdefault(entry.name, CacheConsistency())
        key = self._due_suspect(state) or self._sampled_key(entry, state)
        if key is None:
            return False
        await self.check_key(entry, key)
        return True

    async def check_key(self, entry: RegisteredCache, key: Hashable) -> None:
        """Compare the cached value of `key` with the database's."""
        state = self.caches.setdefault(entry.name, CacheConsistency())
        cached = entry.cache.peek(key)  # type: ignore[attr-defined]
        if cached is MISSING:
            state.suspects.pop(key, None)
            return
        assert entry.reload is not None
        stored = await entry.reload(key)
        if entry.cache.peek(key) is not cached:  # type: ignore[attr-defined]
            state.suspects.pop(key, None)  # changed while we read: look again later
            return
        self._judge(entry, state, key, cached, stored)

    def _judge(
        self,
        entry: RegisteredCache,
        state: CacheConsistency,
        key: Hashable,
        cached: Any,
        stored: Any,
    ) -> None:
        if stored == cached:
            self._agrees(entry.name, state, key)
            return
        now = self._clock()
        suspect = state.suspects.get(key)
        if suspect is None or suspect.value is not cached:
            state.suspects[key] = _Suspect(cached, now)  # maybe in flight: wait
            return
        if now - suspect.since < self.bound:
            return
        del state.suspects[key]
        self._confirmed(entry, state, key, (cached, stored), now - suspect.since)

    def _agrees(self, name: str, state: CacheConsistency, key: Hashable) -> None:
        state.suspects.pop(key, None)
        state.checked += 1
        episode = state.episodes.pop(key, None)
        if episode is not None:
            logger.debug(
                "consistency: %s[%s] agrees with the database again",
                name,
                short_repr(key),
            )

    def _confirmed(
        self,
        entry: RegisteredCache,
        state: CacheConsistency,
        key: Hashable,
        values: tuple[Any, Any],
        age: float,
    ) -> None:
        """Repair a confirmed inconsistency; count and log it once per episode."""
        cached, stored = (digest(v) for v in values)
        dropped = entry.cache.invalidate(key)
        if state.in_episode(key, stored):
            logger.debug(
                "consistency: %s[%s] still differs (same episode): dropped again",
                entry.name,
                short_repr(key),
            )
            return
        state.open_episode(key, stored, self._clock())
        state.checked += 1
        state.inconsistent += 1
        state.repairs += 1 if dropped else 0
        done = (
            "dropped it from this worker's cache: the next read reloads it"
            if dropped
            else "it was already gone from this worker's cache"
        )
        logger.error(
            "consistency: %s[%s] differs from the database %.1f s after the "
            "staleness bound began (cached %s, stored %s); %s",
            entry.name,
            short_repr(key),
            age,
            cached,
            stored,
            done,
        )

    def _due_suspect(self, state: CacheConsistency) -> Hashable | None:
        now = self._clock()
        for key, suspect in state.suspects.items():
            if now - suspect.since >= self.bound:
                return key
        return None

    def _sampled_key(
        self, entry: RegisteredCache, state: CacheConsistency
    ) -> Hashable | None:
        if not state.sample:
            keys = list(entry.cache.keys())  # type: ignore[attr-defined]
            state.sample = self._rng.sample(keys, min(SAMPLE_SIZE, len(keys)))
        return state.sample.pop() if state.sample else None

    def summary(self) -> dict[str, dict[str, Any]]:
        """Return each watched cache's checked/inconsistent/repairs/ratio/nines."""
        return {name: state.summary() for name, state in sorted(self.caches.items())}

    def log_summary(self) -> str:
        """Log the totals as one strict-JSON line (the worker's shutdown summary); return it."""
        text = finite_json.dumps(self.summary())
        logger.info("consistency checks: %s", text)
        return text
