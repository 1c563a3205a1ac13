"""Metric families of process memory, the memory guard, libvips and emergency clears."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from caches.memory import MIB
from metrics.prometheus.families import number

GUARD_STATES = ("safe", "warning", "critical")
#: Sources of emergency clears (the guard's, an operator's command), exported
#: at 0 before their first clear so that increase() sees the first one.
EMERGENCY_SOURCES = ("memory_guard", "operator")


def memory_families(
    *,
    rss_bytes: int | None,
    limit_bytes: int,
    guard: Any,
    process: Mapping[str, Any],
) -> Iterator[Metric]:
    """Yield RSS, the limit, guard state and thresholds, Python and libvips memory."""
    if rss_bytes is not None:
        yield GaugeMetricFamily(
            "tomori_memory_rss_bytes",
            "Resident set size (what the guard measures).",
            value=rss_bytes,
        )
    if limit_bytes:
        yield GaugeMetricFamily(
            "tomori_memory_limit_bytes",
            "Memory limit the guard measures RSS against.",
            value=limit_bytes,
        )
    blocks = number(process.get("python_allocated_blocks"))
    if blocks is not None:
        yield GaugeMetricFamily(
            "tomori_python_allocated_blocks",
            "Memory blocks the Python allocator holds.",
            value=blocks,
        )
    if guard is not None:
        yield from _guard_families(guard)
    yield from _libvips_families(process)


def _guard_families(guard: Any) -> Iterator[Metric]:
    state = GaugeMetricFamily(
        "tomori_memory_guard_state",
        "1 for the memory guard's current state.",
        labels=["state"],
    )
    current = str(guard.state)
    for name in GUARD_STATES:
        state.add_metric([name], 1.0 if name == current else 0.0)
    yield state
    thresholds = GaugeMetricFamily(
        "tomori_memory_guard_threshold_ratio",
        "RSS / limit at which the guard enters each state.",
        labels=["state"],
    )
    thresholds.add_metric(["warning"], guard.warning_threshold)
    thresholds.add_metric(["critical"], guard.critical_threshold)
    yield thresholds
    yield CounterMetricFamily(
        "tomori_memory_emergencies",
        "Times the guard entered critical and ran the emergency handlers.",
        value=guard.emergencies,
    )


_LIBVIPS = {
    "vips_tracked_mem_mb": ("tomori_libvips_tracked_bytes", "libvips tracked memory."),
    "vips_tracked_mem_highwater_mb": (
        "tomori_libvips_tracked_highwater_bytes",
        "Peak libvips tracked memory.",
    ),
}
_LIBVIPS_COUNTS = {
    "vips_tracked_allocs": ("tomori_libvips_tracked_allocations", "Live allocations."),
    "vips_tracked_files": ("tomori_libvips_tracked_files", "Open files."),
    "vips_operation_cache_size": (
        "tomori_libvips_operation_cache_entries",
        "Operations in the libvips cache.",
    ),
}


def _libvips_families(process: Mapping[str, Any]) -> Iterator[Metric]:
    for key, (name, text) in _LIBVIPS.items():
        value = number(process.get(key))
        if value is not None:
            yield GaugeMetricFamily(name, text, value=round(value * MIB))
    for key, (name, text) in _LIBVIPS_COUNTS.items():
        value = number(process.get(key))
        if value is not None:
            yield GaugeMetricFamily(name, text, value=value)


def emergency_families(
    runs: Mapping[str, int], skipped: int, cleared: Mapping[str, int]
) -> Iterator[Metric]:
    """Yield emergency clears by source and the entries they cleared by cache."""
    clears = CounterMetricFamily(
        "tomori_emergency_clears",
        "Emergency cache clears run, by source.",
        labels=["source"],
    )
    for source in sorted(set(runs) | set(EMERGENCY_SOURCES)):
        clears.add_metric([source], runs.get(source, 0))
    yield clears
    yield CounterMetricFamily(
        "tomori_emergency_clears_skipped",
        "Emergency clears skipped (EMERGENCY_CACHE_CLEAR_ENABLED is false).",
        value=skipped,
    )
    entries = CounterMetricFamily(
        "tomori_emergency_cleared_entries",
        "Entries the emergency clears dropped, by cache.",
        labels=["cache"],
    )
    for name, count in sorted(cleared.items()):
        entries.add_metric([name], count)
    yield entries
