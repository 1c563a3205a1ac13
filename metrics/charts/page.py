"""The metric charts page: which series to plot, fetched in four queries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from metrics.charts.queries import (
    TimeRange,
    chart_window,
    emergency_marks,
    load_series,
    recent_fields,
)
from metrics.charts.svg import Chart, render_chart

CACHE_SIZES = "cache_sizes"
HOST_MEMORY = "host_memory"
PROCESS_MB = {
    "rss_mb": "RSS",
    "memory_limit_mb": "memory limit",
    "vips_tracked_mem_mb": "libvips tracked",
}
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
    """Return the charts for a range, the chosen caches and one worker."""
    window = chart_window(range_name, now=now)
    recent = recent_fields(CACHE_SIZES)
    workers = _workers(recent)
    worker = worker if worker in workers else (workers[0] if workers else None)
    newest = next((f for f in recent if f.get("worker_id") == worker), None)
    caches, discord = size_fields(newest or (recent[0] if recent else {}))
    chosen = [k for k in selected if k in caches or k in discord] or caches
    process = load_series(
        CACHE_SIZES,
        [*chosen, *PROCESS_MB, *PYTHON_HEAP],
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


def _charts(
    process: list[Any],
    host: list[Any],
    *,
    chosen: int,
    window: TimeRange,
    marks: list[tuple[datetime, str]],
) -> list[Chart]:
    sizes, memory = process[:chosen], process[chosen:]
    heap_at = len(PROCESS_MB)
    mb_at = len(HOST_MB)
    specs = [
        ("Cache sizes (entries resident, not populations)", "", sizes),
        ("Process memory vs limit (MB)", " MB", memory[:heap_at]),
        ("Python heap (allocated blocks)", "", memory[heap_at:]),
        ("Host memory (MB)", " MB", host[:mb_at]),
        ("Host memory pressure (PSI, % of time stalled)", " %", host[mb_at:]),
    ]
    return [
        render_chart(series, window=window, title=title, unit=unit, marks=marks)
        for title, unit, series in specs
    ]
