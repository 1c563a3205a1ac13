"""Discord snowflake ids: made from a timestamp, and read back as one."""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable

DISCORD_EPOCH_MS = 1_420_070_400_000
ERA_START_MS = 1_451_606_400_000  # 2016-01-01: the oldest generated object.
ERA_END_MS = 1_735_689_600_000  # 2025-01-01: the newest generated object.


def snowflake_at(unix_ms: int, increment: int = 0, *, worker: int = 1) -> int:
    """Return the snowflake for a Unix time in milliseconds and an increment."""
    return (
        ((unix_ms - DISCORD_EPOCH_MS) << 22)
        | ((worker & 0x1F) << 17)
        | (increment & 0xFFF)
    )


def snowflake_unix_ms(snowflake: int) -> int:
    """Return the Unix time in milliseconds a snowflake was made at."""
    return (snowflake >> 22) + DISCORD_EPOCH_MS


def snowflake_iso(snowflake: int) -> str:
    """Return the ISO 8601 UTC time a snowflake was made at, as Discord writes it."""
    moment = dt.datetime.fromtimestamp(snowflake_unix_ms(snowflake) / 1000, dt.UTC)
    return moment.isoformat()


class SnowflakeFactory:
    """Make increasing snowflakes from a clock, as Discord does for new objects."""

    def __init__(self, *, clock: Callable[[], float] = time.time, worker: int = 2):
        self._clock = clock
        self._worker = worker
        self._last = 0

    def next(self) -> int:
        """Return a new snowflake, later than every one made before."""
        candidate = snowflake_at(int(self._clock() * 1000), worker=self._worker)
        # Several ids within one millisecond (or a clock step back) still increase.
        self._last = max(candidate, self._last + 1)
        return self._last


class RandomSnowflakes:
    """Make unique snowflakes at random times within the generated era."""

    def __init__(self, rng: random.Random):
        self._rng = rng
        self._seen: set[int] = set()

    def make(self, after_ms: int = ERA_START_MS) -> int:
        """Return a new unique snowflake made after after_ms."""
        while True:
            moment = self._rng.randint(min(after_ms, ERA_END_MS - 1), ERA_END_MS)
            candidate = snowflake_at(moment, self._rng.randrange(4096))
            if candidate not in self._seen:
                self._seen.add(candidate)
                return candidate
