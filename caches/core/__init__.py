"""The cache core: one bounded, TTL-aware map for every layer (no Django here)."""

from caches.core.bounded import BoundedTTLCache, Loader, refreshing
from caches.core.clock import Clock, FakeClock
from caches.core.flight import Flight, SingleFlight, current_flight
from caches.core.markers import MISSING, DoNotCache, Missing
from caches.core.stepped import SteppedDrop
from caches.core.store import MAX_TTL_QUEUES, ExpiringStore, ScopeFn, ScopeSpec, Within

__all__ = [
    "MAX_TTL_QUEUES",
    "MISSING",
    "BoundedTTLCache",
    "Clock",
    "DoNotCache",
    "ExpiringStore",
    "ScopeFn",
    "ScopeSpec",
    "Within",
    "FakeClock",
    "Flight",
    "Loader",
    "Missing",
    "SingleFlight",
    "SteppedDrop",
    "current_flight",
    "refreshing",
]
