"""A consistency watcher, after Meta's Polaris: measure from the outside how often a cache disagrees with the database.

Off the hot path, at a bounded rate (`CONSISTENCY_CHECKS_PER_SECOND`), it
picks a resident entry of a cache that declares a `reload` (the layer's own
read of one key from the database), reads the key afresh and compares. A
mismatch is only a suspect: the database may have changed a moment ago and
its invalidation be on its way. The suspect is checked again once the
staleness bound (`INVALIDATION_STALENESS_BOUND_SECONDS`) has passed; if the
cache still holds the very same value and it still differs from the
database, that is an inconsistency: counted, and logged once with the key,
digests of both values and the age.
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

from caches.core import MISSING
from caches.core.periodic import run_periodically
from caches.registry import CacheRegistry, RegisteredCache

logger = logging.getLogger(__name__)

#: Resident keys sampled per cache at a time (a fresh sample when used up).
SAMPLE_SIZE = 64


@dataclass
class _Suspect:
    value: Any
    since: float


@dataclass
class CacheConsistency:
    """One cache's checks: how many, and how many found it inconsistent."""

    checked: int = 0
    inconsistent: int = 0
    suspects: dict[Hashable, _Suspect] = field(default_factory=dict)
    sample: list[Hashable] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Return checked, inconsistent, the consistency ratio and its nines."""
        ratio = 1.0 - self.inconsistent / self.checked if self.checked else None
        return {
            "checked": self.checked,
            "inconsistent": self.inconsistent,
            "ratio": ratio,
            "nines": nines(ratio),
        }


def nines(ratio: float | None) -> float | None:
    """Return how many nines `ratio` has (0.999 -> 3.0; 1.0 -> inf; None stays None)."""
    if ratio is None:
        return None
    return math.inf if ratio >= 1.0 else -math.log10(1.0 - ratio)


def digest(value: Any) -> str:
    """Return a short stable digest of a value's repr (values never reach the log)."""
    return hashlib.blake2s(repr(value).encode(), digest_size=6).hexdigest()


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
        self._judge(entry.name, state, key, cached, stored)

    def _judge(
        self,
        name: str,
        state: CacheConsistency,
        key: Hashable,
        cached: Any,
        stored: Any,
    ) -> None:
        suspect = state.suspects.get(key)
        if stored == cached:
            state.suspects.pop(key, None)
            state.checked += 1
            return
        now = self._clock()
        if suspect is None or suspect.value is not cached:
            state.suspects[key] = _Suspect(cached, now)  # maybe in flight: wait
            return
        if now - suspect.since < self.bound:
            return
        del state.suspects[key]
        state.checked += 1
        state.inconsistent += 1
        logger.error(
            "consistency: %s[%r] differs from the database %.1f s after the "
            "staleness bound began (cached %s, stored %s)",
            name,
            key,
            now - suspect.since,
            digest(cached),
            digest(stored),
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
        """Return each watched cache's checked/inconsistent/ratio/nines."""
        return {name: state.summary() for name, state in sorted(self.caches.items())}
