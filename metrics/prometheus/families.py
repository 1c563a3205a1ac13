"""Metric families of caches, discord.py, turns and the worker, from figures it keeps.

Names follow Prometheus conventions: a `tomori_` prefix, base units (bytes,
seconds), `_total` on counters. Labels are bounded: cache names, shard ids,
outcomes, sources, states; never a guild, channel or user id.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from caches.consistency import NINES_CAP

#: Registry stats exported as per-cache counters: stat -> (metric name, help).
CACHE_COUNTERS = {
    "hits": "Reads answered from the cache.",
    "misses": "Reads that found no live entry.",
    "loads": "Loader runs after misses (single flight: one per key at a time).",
    "load_failures": "Loader runs that raised (nothing was cached).",
    "evictions": "Entries dropped to make room at the cap.",
    "expirations": "Entries dropped because their TTL passed.",
    "invalidations": "Entries dropped by invalidations and clears.",
}


def number(value: Any) -> float | None:
    """Return `value` as a float when it is a number (not a bool), else None."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def cache_families(stats: Mapping[str, Mapping[str, Any]]) -> Iterator[Metric]:
    """Yield entries, cap, ttl, in-flight loads and the counters of every cache."""
    gauges = {
        "size": GaugeMetricFamily(
            "tomori_cache_entries", "Entries resident now.", labels=["cache"]
        ),
        "cap": GaugeMetricFamily(
            "tomori_cache_capacity_entries", "Entry cap.", labels=["cache"]
        ),
        "ttl": GaugeMetricFamily(
            "tomori_cache_ttl_seconds", "Entry lifetime.", labels=["cache"]
        ),
        "in_flight": GaugeMetricFamily(
            "tomori_cache_in_flight_loads", "Loads running now.", labels=["cache"]
        ),
    }
    counters = {
        stat: CounterMetricFamily(f"tomori_cache_{stat}", text, labels=["cache"])
        for stat, text in CACHE_COUNTERS.items()
    }
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        **gauges,
        **counters,
    }
    for name, figures in stats.items():
        for stat, family in families.items():
            value = number(figures.get(stat))
            if value is not None:
                family.add_metric([name], value)
    yield from gauges.values()
    yield from counters.values()


def consistency_families(summary: Mapping[str, Mapping[str, Any]]) -> Iterator[Metric]:
    """Yield the consistency watcher's checked, inconsistent and repairs counters, ratio and nines."""
    checked = CounterMetricFamily(
        "tomori_consistency_checked",
        "Cached entries compared with the database by the consistency watcher.",
        labels=["cache"],
    )
    inconsistent = CounterMetricFamily(
        "tomori_consistency_inconsistent",
        "Inconsistency episodes: a key still differing from the database past the "
        "staleness bound, counted once however often it is checked.",
        labels=["cache"],
    )
    repairs = CounterMetricFamily(
        "tomori_consistency_repairs",
        "Confirmed inconsistencies the watcher repaired by dropping the key from "
        "this worker's cache (the next read reloads it); one per episode.",
        labels=["cache"],
    )
    ratio = GaugeMetricFamily(
        "tomori_consistency_ratio",
        "1 - inconsistent / checked (absent before the first check).",
        labels=["cache"],
    )
    nines = GaugeMetricFamily(
        "tomori_consistency_nines",
        f"Number of nines of the consistency ratio, capped at {NINES_CAP:g}: a "
        f"perfect record reports {NINES_CAP:g} (absent before the first check).",
        labels=["cache"],
    )
    for name, figures in summary.items():
        checked.add_metric([name], float(figures.get("checked") or 0))
        inconsistent.add_metric([name], float(figures.get("inconsistent") or 0))
        repairs.add_metric([name], float(figures.get("repairs") or 0))
        if figures.get("ratio") is not None:
            ratio.add_metric([name], float(figures["ratio"]))
            nines.add_metric([name], min(NINES_CAP, float(figures["nines"])))
    yield from (checked, inconsistent, repairs, ratio, nines)


def cache_bytes_family(estimates: Mapping[str, int], sample: int) -> Metric:
    """Return the sampled bytes estimate of every cache."""
    family = GaugeMetricFamily(
        "tomori_cache_estimated_bytes",
        f"Keys and values resident, estimated from up to {sample} sampled entries "
        "per map (deep sys.getsizeof, scaled to the entry count).",
        labels=["cache"],
    )
    for name, value in sorted(estimates.items()):
        family.add_metric([name], value)
    return family


def discord_families(
    counts: Mapping[str, int], *, connected: bool, latency: Mapping[str, float]
) -> Iterator[Metric]:
    """Yield discord.py's cache counts and the gateway's state and latency."""
    entries = GaugeMetricFamily(
        "tomori_discord_cache_entries",
        "Entries in discord.py's own caches (presences: members with one).",
        labels=["cache"],
    )
    for key, value in sorted(counts.items()):
        entries.add_metric([key.removeprefix("discord_")], value)
    yield entries
    yield GaugeMetricFamily(
        "tomori_gateway_connected",
        "1 when every gateway shard of this worker is connected and ready.",
        value=1.0 if connected else 0.0,
    )
    heartbeat = GaugeMetricFamily(
        "tomori_gateway_latency_seconds",
        "Gateway heartbeat round trip per shard.",
        labels=["shard"],
    )
    for shard, seconds in sorted(latency.items()):
        heartbeat.add_metric([shard], seconds)
    yield heartbeat


def histogram_family(
    name: str,
    text: str,
    series: Mapping[tuple[str, ...], tuple[list[tuple[str, int]], float]],
    labels: list[str],
) -> Metric:
    """Return a histogram from {label values: (cumulative buckets, sum)}."""
    family = HistogramMetricFamily(name, text, labels=labels)
    for values, (buckets, total) in sorted(series.items()):
        family.add_metric(list(values), buckets, total)
    return family


def turn_families(counters: Any, timings: Any) -> Iterator[Metric]:
    """Yield the pipeline's message, turn and error counters and turn latency."""
    if counters is not None:
        yield CounterMetricFamily(
            "tomori_messages_received",
            "Messages handed to the pipeline.",
            value=counters.received,
        )
        skipped = CounterMetricFamily(
            "tomori_messages_skipped",
            "Messages that were no turn (the bot's own, other bots and webhooks, "
            "those shed after waiting past PIPELINE_MAX_WAITING, and those dropped "
            "unstarted at shutdown).",
            labels=["reason"],
        )
        skipped.add_metric(["own"], counters.skipped_own)
        skipped.add_metric(["bot"], counters.skipped_bots)
        skipped.add_metric(["shed"], counters.shed)
        skipped.add_metric(["shutdown"], counters.dropped)
        yield skipped
        turns = CounterMetricFamily(
            "tomori_turns", "Turns resolved, by outcome.", labels=["outcome"]
        )
        for outcome, count in sorted(dict(counters.outcomes).items()):
            turns.add_metric([str(outcome)], count)
        yield turns
        yield CounterMetricFamily(
            "tomori_pipeline_errors",
            "Messages whose handling raised.",
            value=counters.errors,
        )
    if timings is not None:
        series: dict[tuple[str, ...], tuple[list[tuple[str, int]], float]] = {
            (str(outcome),): counts.cumulative()
            for outcome, counts in dict(timings.by_outcome).items()
        }
        yield histogram_family(
            "tomori_turn_duration_seconds",
            "Time from a message reaching the pipeline to its turn being resolved.",
            series,
            ["outcome"],
        )


def worker_families(
    *,
    worker_id: str,
    shards: str,
    shard_count: str,
    started_at: float,
    ready: bool,
    refresh_step: float,
) -> Iterator[Metric]:
    """Yield the worker's identity, start time and readiness."""
    info = InfoMetricFamily("tomori_worker", "This bot worker process.")
    info.add_metric(
        [], {"worker_id": worker_id, "shards": shards, "shard_count": shard_count}
    )
    yield info
    yield GaugeMetricFamily(
        "tomori_worker_start_time_seconds",
        "Unix time the worker started.",
        value=started_at,
    )
    yield GaugeMetricFamily(
        "tomori_worker_ready",
        "1 while the worker's readiness probe passes.",
        value=1.0 if ready else 0.0,
    )
    yield GaugeMetricFamily(
        "tomori_metrics_refresh_step_seconds",
        "Longest the last loop-side metrics refresh held the event loop in one step.",
        value=refresh_step,
    )
