"""Fixed-bucket latency counts cheap enough for a hot path (no lock, no allocation)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

#: Latency bounds in seconds, 1-2.5-5 per decade from 0.5 ms to 1 s: the
#: shared middle of the bus's invalidation lag and the turn latency buckets.
LATENCY_BUCKETS = (
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


def bucket_quantile(
    q: float, bounds: Sequence[float], counts: Sequence[int]
) -> float | None:
    """Return the q-quantile of per-bucket `counts` (the last one +Inf), or None if empty.

    As Prometheus's `histogram_quantile` estimates it, so the figure matches
    the Grafana panel: linear within the bucket it falls in, from the bucket
    below's bound (0 for the first); in the +Inf bucket, the highest bound.
    """
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    running = 0
    for index, count in enumerate(counts):
        if count and running + count >= rank:
            if index >= len(bounds):
                return float(bounds[-1])
            lower = float(bounds[index - 1]) if index else 0.0
            return lower + (float(bounds[index]) - lower) * (rank - running) / count
        running += count
    return float(bounds[-1])
