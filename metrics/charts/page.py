"""The metric charts page: which series to plot, fetched in four queries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from metrics.charts.queries import (
    RANGES,
    TimeRange,
    chart_window,
    emergency_marks,
    first_sample_at,
    load_series,
    recent_fields,
)
from metrics.charts.svg import Chart, render_chart

CACHE_SIZES = "cache_sizes"
HOST_MEMORY = "host_memory"
LIMIT_KEY = "memory_limit_mb"
PROCESS_MB = {
    "rss_mb": "RSS",
    LIMIT_KEY: "memory limit",
    "vips_tracked_mem_mb": "libvips tracked",
}
#: memory_limit_source values that mean no container limit is set: the limit
#: is the host's memory, against which RSS is a flat line at zero.
NOT_A_CONTAINER_LIMIT = ("host_total", "unknown")
PYTHON_HEAP = {"python_allocated_blocks": "Python allocated blocks"}
HOST_MB = {
    "mem_available_mb": "host available",
    "mem_total_mb": "host total",
    "swap_used_mb": "swap used",
}
HOST_PSI = {
    "psi_memory_some_avg10": "memory some (avg10)",
    "psi_memory_full_avg10": "memory full (avg10)",
    "psi_io_some_avg10": "io some (avg10)",
}
# Numeric cache_sizes fields that are not one cache's resident size.
_NOT_A_CACHE_PREFIXES = (
    "rss_",
    "python_",
    "gc_",
    "vips_",
    "memory_",
    "loop_",
    "shard_",
)
_TOTALS = {"cache_entries_total", "discord_entries_total"}


@dataclass(frozen=True, slots=True)
class ChartsPage:
    """Everything the charts template shows."""

    window: TimeRange
    charts: list[Chart]
    cache_choices: list[str]
    discord_choices: list[str]
    selected: list[str]
    workers: list[str]
    worker: str | None
    marks: list[tuple[datetime, str]]


def size_fields(fields: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Split a cache_sizes sample's size fields into (app caches, discord.py caches)."""
    caches: list[str] = []
    discord: list[str] = []
    for key, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if key in _TOTALS or key.startswith(_NOT_A_CACHE_PREFIXES):
            continue
        (discord if key.startswith("discord_") else caches).append(key)
    return sorted(caches), sorted(discord)


def _workers(samples: Iterable[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for fields in samples:
        worker = fields.get("worker_id")
        if isinstance(worker, str) and worker:
            seen.setdefault(worker, None)
    return list(seen)


def build_charts_page(
    *,
    range_name: str | None,
    selected: Sequence[str] = (),
    worker: str | None = None,
    now: datetime | None = None,
) -> ChartsPage:
    """Return the charts for a range, the chosen caches and one worker.

    Without a range the default one is fitted to the data (a fresh worker's
    minutes, not a day of empty axis); the memory chart draws the limit only
    when it is a container limit, and is scaled to the data otherwise.
    """
    window = _window(range_name, now=now or timezone.now())
    recent = recent_fields(CACHE_SIZES)
    workers = _workers(recent)
    worker = worker if worker in workers else (workers[0] if workers else None)
    newest = next((f for f in recent if f.get("worker_id") == worker), None)
    newest = newest or (recent[0] if recent else {})
    caches, discord = size_fields(newest)
    chosen = [k for k in selected if k in caches or k in discord] or caches
    memory_keys = [k for k in PROCESS_MB if k != LIMIT_KEY or _has_limit(newest)]
    process = load_series(
        CACHE_SIZES,
        [*chosen, *memory_keys, *PYTHON_HEAP],
        window=window,
        worker_id=worker,
        labels={**PROCESS_MB, **PYTHON_HEAP},
    )
    host = load_series(
        HOST_MEMORY,
        [*HOST_MB, *HOST_PSI],
        window=window,
        labels={**HOST_MB, **HOST_PSI},
    )
    marks = emergency_marks(window=window)
    charts = _charts(process, host, chosen=len(chosen), window=window, marks=marks)
    return ChartsPage(window, charts, caches, discord, chosen, workers, worker, marks)


def _window(range_name: str | None, *, now: datetime) -> TimeRange:
    if range_name in RANGES:
        return chart_window(range_name, now=now)
    return chart_window(None, now=now, first_sample_at=first_sample_at(CACHE_SIZES))


def _has_limit(sample: dict[str, Any]) -> bool:
    # Rows from before the source was recorded carry a limit of unknown origin.
    return sample.get("memory_limit_source") not in NOT_A_CONTAINER_LIMIT


def _charts(
    process: list[Any],
    host: list[Any],
    *,
    chosen: int,
    window: TimeRange,
    marks: list[tuple[datetime, str]],
) -> list[Chart]:
    sizes, memory = process[:chosen], process[chosen:]
    limit = any(s.key == LIMIT_KEY for s in memory)
    heap_at = len(memory) - len(PYTHON_HEAP)
    mb_at = len(HOST_MB)
    memory_title = (
        "Process memory vs container limit (MB)"
        if limit
        else "Process memory (MB; no container limit set)"
    )
    specs = [
        ("Cache sizes (entries resident, not populations)", "", sizes),
        (memory_title, " MB", memory[:heap_at]),
        ("Python heap (allocated blocks)", "", memory[heap_at:]),
        ("Host memory (MB)", " MB", host[:mb_at]),
        ("Host memory pressure (PSI, % of time stalled)", " %", host[mb_at:]),
    ]
    return [
        render_chart(series, window=window, title=title, unit=unit, marks=marks)
        for title, unit, series in specs
    ]
