"""Invalidation: every write to a cache-feeding table invalidates its keys after commit.

Rules (`caches.rules`) map a row change to events; signal receivers and the
`CacheFeedingQuerySet` hooks record them for the current transaction; on
commit they are applied to this process's registry and published on the bus
(`caches.bus`) to every other process.
"""

from caches.invalidation.collector import (
    Captured,
    Touched,
    capture,
    dispatch,
    raw_write,
    record,
)
from caches.invalidation.describe import describe, describe_event
from caches.invalidation.tracking import record_change
from caches.invalidation.wiring import cache_feeding_models, connect_signals
from caches.rules import Event

__all__ = [
    "Captured",
    "Event",
    "Touched",
    "cache_feeding_models",
    "capture",
    "connect_signals",
    "describe",
    "describe_event",
    "dispatch",
    "raw_write",
    "record",
    "record_change",
]
