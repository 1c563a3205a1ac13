"""Clocks for the cache core: the type every cache accepts and a fake for tests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

Clock = Callable[[], float]

#: The current time as an aware UTC datetime: what Django's `timezone.now()`
#: returns with USE_TZ (the project's setting), without its settings lookup
#: (a lazy-object read) on every call. For stored timestamps and expiry
#: checks on hot paths.
utc_now: Callable[[], datetime] = partial(datetime.now, UTC)


class FakeClock:
    """A manual monotonic clock: time moves only when a test calls `advance`."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        """Return the current fake time in seconds."""
        return self.now

    def advance(self, seconds: float) -> float:
        """Move time forward by `seconds` and return the new time."""
        if seconds < 0:
            # Caches rely on a non-decreasing clock (their expiry queues are
            # ordered by store time), so going back in time is a test bug.
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        self.now += seconds
        return self.now

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now!r})"
