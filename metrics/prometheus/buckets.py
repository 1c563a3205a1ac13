"""Turn latency buckets (the counting primitive is ``caches.core.buckets``)."""

from __future__ import annotations

from collections.abc import Sequence

from caches.core.buckets import LATENCY_BUCKETS, BucketCounts

__all__ = ["TURN_BUCKETS", "BucketCounts", "TurnTimings"]

#: Turn latency bounds in seconds: a warm turn takes ~0.1 ms, a cold one ~25 ms.
TURN_BUCKETS = (0.0001, 0.00025, *LATENCY_BUCKETS, 2.5)


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
