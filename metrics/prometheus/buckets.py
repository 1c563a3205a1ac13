"""Fixed-bucket latency counts cheap enough for a hot path (no lock, no allocation)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

#: Turn latency bounds in seconds: a warm turn takes ~0.1 ms, a cold one ~25 ms.
TURN_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
#: Invalidation lag bounds in seconds: ~1 ms over Redis, up to the outbox bound.
LAG_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)


class BucketCounts:
    """Observations counted per bucket (upper bounds inclusive) plus their sum.

    `observe` costs one bisect and two additions. Written by one thread; a
    reader on another thread may see a count one observation ahead of the
    sum, never a torn bucket list (the list is never replaced).
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("bucket bounds must be distinct and ascending")
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count one observation (a negative one, from clock skew, counts as 0)."""
        value = max(value, 0.0)
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> tuple[list[tuple[str, int]], float]:
        """Return Prometheus-style cumulative buckets (le, count) and the sum."""
        counts = list(self.counts)
        running = 0
        buckets: list[tuple[str, int]] = []
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return buckets, self.total


class TurnTimings:
    """Turn latency per outcome: one `BucketCounts` per outcome, made on first use."""

    __slots__ = ("bounds", "by_outcome")

    def __init__(self, bounds: Sequence[float] = TURN_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.by_outcome: dict[str, BucketCounts] = {}

    def observe(self, outcome: str, seconds: float) -> None:
        """Count one turn of `outcome` that took `seconds`."""
        counts = self.by_outcome.get(outcome)
        if counts is None:
            counts = self.by_outcome[outcome] = BucketCounts(self.bounds)
        counts.observe(seconds)
