"""How long the cyclic GC stops the worker: `tomori_gc_pause_seconds{generation}`.

`python_gc_collections_total` counts collections; it does not say what they
cost. A full (generation 2) collection walks every tracked object allocated
since start-up's freeze (`tomori.bot.gc_policy`), which grows with the
caches (0.15-0.2 s each at a full shard). Each collection is timed from
CPython's `gc.callbacks` (its start and stop, in the thread that runs it)
into a histogram per generation. The figure is wall time: what the thread
that collects (most often the event loop) waits, including the finalizers
the collection runs (which may let another thread take the GIL) and any
time the OS schedules the process out on a busy host; read it as an upper
bound of the GC's CPU. Installed once per process; about 1 us per
collection.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from caches.core.buckets import LATENCY_BUCKETS, BucketCounts
from metrics.prometheus.families import histogram_family

#: Pause bounds in seconds: a young collection takes microseconds, a full
#: one over a grown heap hundreds of milliseconds.
GC_PAUSE_BUCKETS = (0.0001, 0.00025, *LATENCY_BUCKETS, 2.5)


class GcPauses:
    """Per-generation histograms of collection pauses, fed by `gc.callbacks`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.by_generation = [BucketCounts(GC_PAUSE_BUCKETS) for _ in range(3)]
        self._started: float | None = None

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        """Time one collection (`gc.callbacks`' signature)."""
        if phase == "start":
            self._started = self._clock()
            return
        started, self._started = self._started, None
        if started is not None:
            generation = min(max(int(info.get("generation", 2)), 0), 2)
            self.by_generation[generation].observe(self._clock() - started)

    def install(self) -> None:
        """Time this process's collections from now on (once: a second call is a no-op)."""
        if self.callback not in gc.callbacks:
            gc.callbacks.append(self.callback)


#: The process's (one set of callbacks per interpreter).
PROCESS_GC_PAUSES = GcPauses()


class GcPauseCollector(Collector):
    """Export `tomori_gc_pause_seconds{generation}` (installs the process's callbacks)."""

    def __init__(self, pauses: GcPauses = PROCESS_GC_PAUSES) -> None:
        self._pauses = pauses
        pauses.install()

    def collect(self) -> Iterator[Metric]:
        """Yield the histogram of collection pauses per generation."""
        yield histogram_family(
            "tomori_gc_pause_seconds",
            "Wall time of each cyclic GC collection in the thread that ran it, by generation "
            "(2: full collections, which grow with the heap).",
            {
                (str(generation),): counts.cumulative()
                for generation, counts in enumerate(self._pauses.by_generation)
            },
            ["generation"],
        )
