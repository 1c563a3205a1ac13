"""The fleet at a glance: a row per live worker (troubled ones first), a row per cache summed over them.

Built from the same `WorkerView`s as a worker's own page, so the fleet's
figures and a worker's always agree: a cache's entries, evictions and
invalidations are sums over the workers that hold it, its hit rate is
weighted by their lookups (all hits over all lookups), and its fill is the
fullest worker's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from caches.consistency import nines
from caches.operations.stats import (
    FILL_DANGER,
    FILL_WARNING,
    LayerRow,
    WorkerView,
    format_duration,
)

#: A snapshot older than this many publish intervals is stale: the worker
#: missed a publication (its loop may be stuck); it disappears at three.
STALE_INTERVALS = 2.0
#: Readiness checks (metrics.prometheus.health), as a failing one reads.
NOT_READY_TEXTS = {
    "event_loop": "event loop stalled",
    "caches_warmed": "caches not warmed",
    "bus_subscribed": "bus not subscribed",
    "gateway_connected": "gateway not connected",
    "not_stopping": "stopping",
}
_SUMMED = (
    "size",
    "hits",
    "misses",
    "loads",
    "load_failures",
    "evictions",
    "expirations",
    "invalidations",
    "stale_entries",
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a worker: "danger" (act now) or "warning" (look into it)."""

    level: str
    text: str


def worker_problems(
    view: WorkerView, *, stale_after: float, now: float | None = None
) -> list[Problem]:
    """Return what is wrong with a worker: guard, bus, readiness, snapshot age, consistency."""
    problems = []
    state = str(view.memory.get("state") or "").lower()
    if state in ("warning", "critical"):
        level = "danger" if state == "critical" else "warning"
        problems.append(Problem(level, f"memory {state}"))
    if view.bus and view.bus.get("mode") != "local" and not view.bus.get("connected"):
        problems.append(Problem("danger", "bus down"))
    if view.ready is False:
        failing = ", ".join(NOT_READY_TEXTS.get(n, n) for n in view.not_ready)
        problems.append(Problem("danger", f"not ready ({failing or 'unknown'})"))
    age = view.age_seconds(now)
    if age is not None and age > stale_after:
        problems.append(Problem("danger", f"snapshot {format_duration(age)} old"))
    inconsistent = consistency_totals(view)[1]
    if inconsistent:
        word = "inconsistency" if inconsistent == 1 else "inconsistencies"
        problems.append(Problem("warning", f"{inconsistent:,} {word} found"))
    return problems


def consistency_totals(view: WorkerView) -> tuple[int, int]:
    """Return (checked, inconsistent) over every cache the worker's watcher checks."""
    found = view.consistency.values()
    checked = sum(int(c.get("checked") or 0) for c in found)
    return checked, sum(int(c.get("inconsistent") or 0) for c in found)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One live worker in the fleet overview, with what is wrong with it."""

    worker: WorkerView
    problems: list[Problem]
    age_seconds: float | None
    uptime_seconds: float | None

    @property
    def level(self) -> str:
        """Return "danger", "warning" or "ok": the worst of its problems."""
        levels = {problem.level for problem in self.problems}
        return next((lv for lv in ("danger", "warning") if lv in levels), "ok")

    @property
    def guilds(self) -> int | None:
        """Return the guilds discord.py holds, or None before the client counts."""
        return self.worker.discord.get("discord_guilds")

    @property
    def hit_rate(self) -> float | None:
        """Return all hits over all lookups of the worker's caches, in percent."""
        hits = sum(layer.hits for layer in self.worker.layers)
        lookups = hits + sum(layer.misses for layer in self.worker.layers)
        return round(100 * hits / lookups, 1) if lookups else None

    @property
    def nines(self) -> float | None:
        """Return the nines of all its consistency checks together (None: none yet)."""
        checked, inconsistent = consistency_totals(self.worker)
        return nines(1.0 - inconsistent / checked) if checked else None


def _worker_sort_key(row: WorkerRow) -> tuple[int, str]:
    rank = {"danger": 0, "warning": 1}.get(row.level, 2)
    return rank, row.worker.worker_id


def worker_rows(
    views: Iterable[WorkerView], *, snapshot_interval: float, now: float | None = None
) -> list[WorkerRow]:
    """Return one row per worker: those with a problem first (the worst first), then by id."""
    now = time.time() if now is None else now
    stale_after = STALE_INTERVALS * snapshot_interval
    rows = [
        WorkerRow(
            worker=view,
            problems=worker_problems(view, stale_after=stale_after, now=now),
            age_seconds=view.age_seconds(now),
            uptime_seconds=view.uptime_seconds(now),
        )
        for view in views
    ]
    return sorted(rows, key=_worker_sort_key)


@dataclass(frozen=True, slots=True)
class FleetCache:
    """One cache across the fleet: its figures summed, and each worker's row."""

    total: LayerRow
    per_worker: list[tuple[WorkerView, LayerRow]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """Return the cache's name."""
        return self.total.name

    @property
    def caps(self) -> list[int]:
        """Return the distinct per-worker caps, smallest first (one in a uniform fleet)."""
        return sorted({row.cap for _, row in self.per_worker if row.cap is not None})

    @property
    def max_fill(self) -> float | None:
        """Return the fullest worker's fill in percent (None: uncapped)."""
        fills = [row.fill_percent for _, row in self.per_worker]
        known = [fill for fill in fills if fill is not None]
        return max(known) if known else None

    @property
    def level(self) -> str:
        """Return "danger", "warning" or "ok" for the fullest worker."""
        fill = self.max_fill or 0.0
        if fill >= FILL_DANGER:
            return "danger"
        return "warning" if fill >= FILL_WARNING else "ok"


def _summed(rows: list[LayerRow]) -> LayerRow:
    first = rows[0]
    sums: dict[str, Any] = {
        name: sum(getattr(r, name) for r in rows) for name in _SUMMED
    }
    lasts = [r.last_invalidation for r in rows if r.last_invalidation is not None]
    sizes = [r.bytes_estimate for r in rows if r.bytes_estimate is not None]
    caps = [r.cap for r in rows if r.cap is not None]
    return dataclasses.replace(
        first,
        **sums,
        cap=max(caps) if caps else None,
        last_invalidation=max(lasts) if lasts else None,
        bytes_estimate=sum(sizes) if sizes else None,
        members={},
    )


def fleet_caches(views: Iterable[WorkerView]) -> list[FleetCache]:
    """Return one entry per cache any worker holds, in the order the workers list them."""
    by_name: dict[str, list[tuple[WorkerView, LayerRow]]] = {}
    for view in views:
        for layer in view.layers:
            by_name.setdefault(layer.name, []).append((view, layer))
    return [
        FleetCache(total=_summed([row for _, row in rows]), per_worker=rows)
        for rows in by_name.values()
    ]


def fleet_cache(views: Iterable[WorkerView], name: str) -> FleetCache | None:
    """Return cache `name` across the fleet, or None when no live worker holds it."""
    return next((entry for entry in fleet_caches(views) if entry.name == name), None)


def missing_shards(views: Iterable[WorkerView]) -> list[int]:
    """Return the shard ids no live worker serves, when the workers agree on the count."""
    views = list(views)
    counts = {view.shard_count for view in views if view.shard_count}
    if len(counts) != 1:
        return []
    served = {shard for view in views for shard in (view.shard_ids or ())}
    return sorted(set(range(counts.pop())) - served)
