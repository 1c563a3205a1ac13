"""Metric families of what a worker depends on: database breakers, catalogs, metric_samples.

Each is a signal an alerting rule reads (deploy/prometheus/alerts.yaml): the
database breaker's state, the age and TTL of each OpenRouter catalog's
serving snapshot, the metric_samples writes, and the staleness bound that
the invalidation lag is held against.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from caches.core.breaker import CLOSED, HALF_OPEN, OPEN

BREAKER_STATES = (CLOSED, OPEN, HALF_OPEN)


def breaker_families(breakers: dict[str, Any], *, timeouts: int) -> Iterator[Metric]:
    """Yield each database lane's breaker state, trips and refused calls, and timeouts."""
    state = GaugeMetricFamily(
        "tomori_database_breaker_state",
        "1 for the current state of each database lane's circuit breaker.",
        labels=["lane", "state"],
    )
    trips = CounterMetricFamily(
        "tomori_database_breaker_trips",
        "Times a lane's breaker opened after a call had no answer in time.",
        labels=["lane"],
    )
    refused = CounterMetricFamily(
        "tomori_database_breaker_refused",
        "Database calls the open breaker refused.",
        labels=["lane"],
    )
    for lane, breaker in sorted(breakers.items()):
        for name in BREAKER_STATES:
            state.add_metric([lane, name], 1.0 if breaker.state == name else 0.0)
        trips.add_metric([lane], breaker.trips)
        refused.add_metric([lane], breaker.refused)
    yield from (state, trips, refused)
    yield CounterMetricFamily(
        "tomori_database_call_timeouts",
        "Database calls that had no answer within DB_CALL_TIMEOUT_SECONDS.",
        value=timeouts,
    )


def catalog_families(catalogs: Iterable[Any]) -> Iterator[Metric]:
    """Yield each catalog's readiness, TTL and the fetch time of its serving snapshot."""
    ready = GaugeMetricFamily(
        "tomori_catalog_ready",
        "1 while the catalog serves a snapshot.",
        labels=["catalog"],
    )
    ttl = GaugeMetricFamily(
        "tomori_catalog_ttl_seconds",
        "Age past which the catalog is refreshed.",
        labels=["catalog"],
    )
    fetched = GaugeMetricFamily(
        "tomori_catalog_snapshot_timestamp_seconds",
        "Unix time the serving snapshot was fetched (absent before the first).",
        labels=["catalog"],
    )
    for catalog in catalogs:
        status = catalog.status()
        ready.add_metric([catalog.name], 1.0 if status["ready"] else 0.0)
        ttl.add_metric([catalog.name], float(catalog.ttl))
        if status["last_success"] is not None:
            fetched.add_metric([catalog.name], float(status["last_success"]))
    yield from (ready, ttl, fetched)


def metric_sample_families(
    *, inserted: int, failures: int, dropped: int
) -> Iterator[Metric]:
    """Yield the metric_samples rows inserted, failed and dropped."""
    for name, value, text in (
        ("inserted", inserted, "metric_samples rows inserted."),
        ("failures", failures, "metric_samples inserts that failed (not retried)."),
        ("dropped", dropped, "metric_samples rows dropped with the backlog full."),
    ):
        yield CounterMetricFamily(f"tomori_metric_samples_{name}", text, value=value)


def staleness_bound_family(bound_seconds: float) -> Metric:
    """Return INVALIDATION_STALENESS_BOUND_SECONDS as a gauge (the lag alert's bound)."""
    return GaugeMetricFamily(
        "tomori_invalidation_staleness_bound_seconds",
        "Longest a committed change may be served stale "
        "(INVALIDATION_STALENESS_BOUND_SECONDS).",
        value=bound_seconds,
    )
