"""A worker's messages per second and turn p99 over its last minute, for its live snapshot.

Nothing here runs per message: the pipeline already counts the messages it
receives and the client already buckets each turn's latency (the Prometheus
histogram). Each time the worker builds its snapshot (every few seconds) it
hands `TrafficWindow.sample` those cumulative figures; the window keeps the
samples of the last minute and reports the difference between now and the
oldest of them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from caches.core.buckets import BucketCounts, bucket_quantile
from caches.messages import TrafficFigures

#: The span the dashboard's "last minute" figures cover.
WINDOW_SECONDS = 60.0

_Sample = tuple[float, int, tuple[int, ...]]  # (clock, messages, bucket counts)


def merged_counts(buckets: Iterable[BucketCounts], size: int) -> tuple[int, ...]:
    """Return the per-bucket counts of several histograms of the same bounds, summed."""
    totals = [0] * size
    for counts in buckets:
        for index, count in enumerate(counts.counts):
            totals[index] += count
    return tuple(totals)


class TrafficWindow:
    """Messages per second and turn p99 between now and a minute ago, from cumulative counts."""

    def __init__(
        self,
        bounds: Sequence[float],
        *,
        seconds: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bounds = tuple(bounds)
        self.seconds = seconds
        self._clock = clock
        self._samples: deque[_Sample] = deque()

    def sample(self, *, messages: int, buckets: Sequence[int]) -> TrafficFigures:
        """Note the cumulative figures now; return the last minute's rates."""
        now = self._clock()
        self._samples.append((now, messages, tuple(buckets)))
        # Keep the newest sample at least a minute old: it is the window's start.
        while len(self._samples) > 1 and now - self._samples[1][0] >= self.seconds:
            self._samples.popleft()
        return self._figures(self._samples[0], self._samples[-1])

    def _figures(self, start: _Sample, end: _Sample) -> TrafficFigures:
        span = end[0] - start[0]
        messages = max(end[1] - start[1], 0)
        counts = [max(b - a, 0) for a, b in zip(start[2], end[2], strict=True)]
        p99 = bucket_quantile(0.99, self.bounds, counts)
        return TrafficFigures(
            window_seconds=round(span, 3),
            messages=messages,
            messages_per_second=round(messages / span, 3) if span > 0 else None,
            turns=sum(counts),
            turn_p99_ms=None if p99 is None else round(p99 * 1000, 3),
        )
