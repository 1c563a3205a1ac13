"""What the dashboard's three pages show: the fleet, one worker, one cache across the fleet.

Each builder reads the live snapshots once and returns the template context
(without the admin's own), or the context of a "not live" page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caches.live import snapshot_ttl_seconds
from caches.operations import (
    DATABASE_ERRORS,
    LiveWorkers,
    WorkerRow,
    database_fault,
    ensure_layers_loaded,
    fleet_cache,
    fleet_caches,
    missing_shards,
    read_live_workers,
    worker_rows,
)
from caches.operations.fleet import STALE_INTERVALS
from caches.registry import registry
from metrics.charts.last_sample import (
    LastSample,
    last_cache_sizes_sample,
    sample_age_note,
)
from tomori.domain.knobs import knobs


@dataclass(frozen=True, slots=True)
class Page:
    """A page's context, and its status: 404 for a worker or cache no live worker has."""

    context: dict[str, Any]
    status: int = 200


def cache_choices(worker_caches: set[str]) -> list[tuple[str, str]]:
    """Return (name, "name: key help") for every cache this process or a worker knows."""
    ensure_layers_loaded()
    helps = {entry.name: entry.key_help for entry in registry.entries()}
    names = sorted(set(helps) | worker_caches)
    return [(n, f"{n}: {helps[n]}" if helps.get(n) else n) for n in names]


def last_sample_or_fault() -> tuple[LastSample | None, str | None]:
    """Return the newest cache_sizes sample, or why it cannot be read."""
    try:
        return last_cache_sizes_sample(), None
    except DATABASE_ERRORS as exc:
        return None, f"{database_fault(exc)} (no stored sample can be shown)"


def live_faults(live: LiveWorkers, sample: LastSample | None) -> list[str]:
    """Return the banner lines: each fault, with the last sample's age if live data is missing."""
    if live.live:
        return list(live.faults)
    first, *rest = live.faults
    return [f"Live worker data unavailable: {first}; {sample_age_note(sample)}.", *rest]


def stored_data_notes() -> list[str]:
    """Return warnings about stored data this process cannot use (webhook keys)."""
    from caches.layers.webhook import describe_missing_keys, webhooks_under_missing_keys

    try:
        counts = webhooks_under_missing_keys()
    except DATABASE_ERRORS:
        return []  # a lost database shows as the 503 page or a fault line
    return [describe_missing_keys(counts)] if counts else []


def _snapshot_interval() -> float:
    return float(knobs().WORKER_SNAPSHOT_INTERVAL_SECONDS)


def _common(live: LiveWorkers) -> dict[str, Any]:
    # A worker's or a cache's page has no stored sample to fall back on.
    unread = "" if live.live else "Live worker data unavailable: "
    return {
        "live_known": live.live,
        "snapshot_ttl": snapshot_ttl_seconds(),
        "stale_after": STALE_INTERVALS * _snapshot_interval(),
        "notes": stored_data_notes(),
        "faults": [unread + fault for fault in live.faults],
    }


def fleet_page() -> Page:
    """Return the dashboard: a row per live worker, a row per cache, the fleet's totals."""
    live = read_live_workers()
    workers = live.workers
    sample, sample_fault = (None, None) if workers else last_sample_or_fault()
    rows = worker_rows(workers, snapshot_interval=_snapshot_interval())
    caches = fleet_caches(workers)
    faults = live_faults(live, sample) + ([sample_fault] if sample_fault else [])
    return Page(
        {
            **_common(live),
            "workers": workers,
            "worker_rows": rows,
            "troubled": sum(row.level != "ok" for row in rows),
            "totals": _totals(rows),
            "missing_shards": missing_shards(workers),
            "fleet_caches": caches,
            "fleet_entries": sum(entry.total.size for entry in caches),
            "cache_names": {entry.name for entry in caches},
            "legend_caches": [(e.name, e.total.description) for e in caches],
            "faults": faults,
            "last_sample": sample,
        }
    )


def _totals(rows: list[WorkerRow]) -> dict[str, Any]:
    rates = [row.worker.traffic.get("messages_per_second") for row in rows]
    guilds = [row.guilds for row in rows if row.guilds is not None]
    return {
        "guilds": sum(guilds) if guilds else None,  # None: no client counts yet
        "messages_per_second": sum(rate or 0.0 for rate in rates),
    }


def worker_page(worker_id: str) -> Page:
    """Return one worker's page (its panels, caches, turns), or a 404 saying it is not live."""
    live = read_live_workers()
    view = next((w for w in live.workers if w.worker_id == worker_id), None)
    context = {
        **_common(live),
        "worker_id": worker_id,
        "live_ids": [w.worker_id for w in live.workers],
    }
    if view is None:
        return Page(context, status=404 if live.live else 503)
    [row] = worker_rows([view], snapshot_interval=_snapshot_interval())
    legend = [(layer.name, layer.description) for layer in view.layers]
    return Page({**context, "worker": view, "row": row, "legend_caches": legend})


def cache_page(name: str) -> Page:
    """Return one cache across the fleet (a row per worker), or a 404 if no live worker holds it."""
    live = read_live_workers()
    entry = fleet_cache(live.workers, name)
    ensure_layers_loaded()
    context = {
        **_common(live),
        "cache_name": name,
        "registered": name in registry,
        "entry": entry,
    }
    if entry is None:
        return Page(context, status=404 if live.live else 503)
    return Page(context)
