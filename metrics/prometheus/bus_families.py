"""Metric families of the invalidation bus, the outbox follower and invalidation lag."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from caches.bus.stats import COUNTERS
from metrics.prometheus.families import histogram_family, number

OUTBOX_COUNTERS = {
    "outbox_caught_up": "Outbox rows applied that the bus had not delivered.",
    "outbox_skipped": "Outbox rows skipped because the bus had delivered them.",
    "outbox_failures": "Outbox polls that failed (database unreachable).",
    "outbox_restarts": "Times the worker cleared every cache and restarted from the newest row.",
}


def bus_families(status: Mapping[str, Any], lag: Any) -> Iterator[Metric]:
    """Yield the bus's connection, backlog and counters, the outbox, and lag."""
    yield GaugeMetricFamily(
        "tomori_bus_connected",
        "1 while the bus subscriber is subscribed.",
        value=1.0 if status.get("connected") else 0.0,
    )
    yield GaugeMetricFamily(
        "tomori_bus_publish_backlog",
        "Messages waiting to be published to Redis.",
        value=number(status.get("backlog")) or 0.0,
    )
    for name in COUNTERS:
        if name in OUTBOX_COUNTERS:
            continue
        yield CounterMetricFamily(
            f"tomori_bus_{name}",
            f"Bus counter {name!r}.",
            value=number(status.get(name)) or 0.0,
        )
    yield from _outbox_families(status)
    buckets, total = lag
    yield histogram_family(
        "tomori_invalidation_lag_seconds",
        "Commit to applied, per invalidation message this worker applied.",
        {(): (buckets, total)},
        [],
    )


def _outbox_families(status: Mapping[str, Any]) -> Iterator[Metric]:
    for name, text in OUTBOX_COUNTERS.items():
        yield CounterMetricFamily(
            f"tomori_{name}", text, value=number(status.get(name)) or 0.0
        )
    outbox = status.get("outbox") or {}
    yield GaugeMetricFamily(
        "tomori_outbox_following",
        "1 when this worker follows the invalidation outbox.",
        value=1.0 if outbox.get("following") else 0.0,
    )
    for key, name, text in (
        ("applied_through", "tomori_outbox_applied_through_id", "Highest row applied."),
        ("open_gaps", "tomori_outbox_open_gaps", "Row ids not yet seen below it."),
    ):
        value = number(outbox.get(key))
        if value is not None:
            yield GaugeMetricFamily(name, text, value=value)
