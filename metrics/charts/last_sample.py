"""The newest cache_sizes row, which the dashboard and `cache_stats` show when no worker is live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from caches.operations.stats import format_duration
from metrics.charts.page import size_fields
from metrics.charts.queries import latest_sample


@dataclass(frozen=True, slots=True)
class LastSample:
    """The newest `cache_sizes` row, shown when no worker is live."""

    created_at: Any
    age_seconds: float
    sizes: dict[str, Any]
    discord: dict[str, Any]
    memory: dict[str, Any]


def last_cache_sizes_sample() -> LastSample | None:
    """Return the newest cache_sizes sample split into sizes, discord and memory."""
    row = latest_sample("cache_sizes")
    if row is None or not isinstance(row.fields, dict):
        return None
    caches, discord = size_fields(row.fields)
    memory_keys = ("rss_mb", "memory_limit_mb", "memory_percent", "memory_state")
    return LastSample(
        created_at=row.created_at,
        age_seconds=(timezone.now() - row.created_at).total_seconds(),
        sizes={name: row.fields[name] for name in caches},
        discord={name: row.fields[name] for name in discord},
        memory={k: row.fields[k] for k in memory_keys if k in row.fields},
    )


def sample_age_note(sample: LastSample | None) -> str:
    """Return "the last cache_sizes sample is 3 min old" (or that none is stored)."""
    if sample is None:
        return "no cache_sizes sample is stored"
    return f"the last cache_sizes sample is {format_duration(sample.age_seconds)} old"
