"""Bus counters and invalidation-lag percentiles over a rolling window."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from caches.core.buckets import LATENCY_BUCKETS, BucketCounts

#: Invalidation lag bounds in seconds: ~1 ms over Redis, up to the outbox bound.
LAG_BUCKETS = (*LATENCY_BUCKETS, 2.0, 5.0, 10.0)

COUNTERS = (
    "received",
    "applied",
    "local",
    "own_skipped",
    "duplicates",
    "gaps",
    "flushes",
    "disconnects",
    "published",
    "publish_failures",
    "backlog_dropped",
    "rejected",
    "unknown_events",  # named a cache or operation this process does not know
    "by_outbox",  # batches too large to carry their events: read from the outbox
    "commands_handled",
    "commands_expired",
    "outbox_caught_up",
    "outbox_skipped",
    "outbox_failures",
    "outbox_restarts",
)


class LagWindow:
    """The last `size` lag samples (seconds), summarised as p50/p99/max in ms."""

    def __init__(self, size: int = 1000) -> None:
        self._samples: deque[float] = deque(maxlen=size)
        self.total = 0

    def add(self, seconds: float) -> None:
        """Add one sample (clock skew between hosts can make it negative: keep 0)."""
        self._samples.append(max(seconds, 0.0))
        self.total += 1

    def summary(self) -> dict[str, Any]:
        """Return count, window size and p50/p99/max in milliseconds (None if empty)."""
        ordered = sorted(self._samples)
        if not ordered:
            return {
                "count": self.total,
                "window": 0,
                "p50_ms": None,
                "p99_ms": None,
                "max_ms": None,
            }
        return {
            "count": self.total,
            "window": len(ordered),
            "p50_ms": _rank(ordered, 0.50) * 1000,
            "p99_ms": _rank(ordered, 0.99) * 1000,
            "max_ms": ordered[-1] * 1000,
        }


def _rank(ordered: list[float], quantile: float) -> float:
    # Nearest-rank percentile.
    return ordered[max(math.ceil(quantile * len(ordered)) - 1, 0)]


class BusStats:
    """Thread-safe counters, a connected flag and lag samples that tests can wait on."""

    def __init__(self, lag_window: int = 1000) -> None:
        self._cond = threading.Condition()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._lag = LagWindow(lag_window)
        self._lag_buckets = BucketCounts(LAG_BUCKETS)
        self.connected = False

    def incr(self, name: str, amount: int = 1) -> None:
        """Add `amount` to counter `name`."""
        with self._cond:
            self._counts[name] += amount
            self._cond.notify_all()

    def set_connected(self, connected: bool) -> None:
        """Record whether the subscriber is subscribed right now."""
        with self._cond:
            self.connected = connected
            self._cond.notify_all()

    def applied(self, lag: float | None) -> None:
        """Count one applied bus message and its lag in seconds (None: not measured).

        A lag that is not finite is not a measurement: no metric may turn NaN.
        """
        with self._cond:
            self._counts["applied"] += 1
            if lag is not None and math.isfinite(lag):
                self._lag.add(lag)
                self._lag_buckets.observe(lag)
            self._cond.notify_all()

    def lag_histogram(self) -> tuple[list[tuple[str, int]], float]:
        """Return every lag sample so far as cumulative buckets (le, count) and sum."""
        with self._cond:
            return self._lag_buckets.cumulative()

    def snapshot(self) -> dict[str, Any]:
        """Return every counter, the connected flag and the lag summary."""
        with self._cond:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        return {**self._counts, "connected": self.connected, "lag": self._lag.summary()}

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float
    ) -> bool:
        """Block until `predicate(snapshot)` holds or `timeout` passes; return which."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self._snapshot()), timeout)
