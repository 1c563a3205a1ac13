"""Per-worker views of the live snapshots: one row per cache layer, with warnings."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from caches.messages import CacheStats, WorkerSnapshot
from caches.operations.faults import DATABASE_ERRORS, database_fault
from caches.operations.worker import is_clearable
from caches.registry import EmergencyPolicy
from tomori.domain.repositories.population import Population

FILL_WARNING = 75.0
FILL_DANGER = 90.0
#: The one word per emergency policy that the table, the buttons and the
#: results use (the per-cache button, "Clear every clearable cache" and the
#: emergency clear all act on exactly the "clearable" caches).
POLICY_LABELS = {
    EmergencyPolicy.CLEAR.value: "clearable",
    EmergencyPolicy.PRESERVE.value: "preserved",
    EmergencyPolicy.EXPIRED_ONLY.value: "expired only",
}
MEMBER_LABELS = {"primary": "main", "last_good": "last good"}


@dataclass(frozen=True, slots=True)
class LayerRow:
    """One cache layer of one worker, as the dashboard and `cache_stats` show it."""

    name: str
    description: str
    policy: str
    invalidatable: bool
    ttl: float | None
    cap: int | None
    size: int
    hits: int
    misses: int
    loads: int
    load_failures: int
    evictions: int
    expirations: int
    invalidations: int
    last_invalidation: float | None
    #: A composite layer's member maps (label -> cap / size), primary first.
    member_caps: dict[str, int] = field(default_factory=dict)
    members: dict[str, int] = field(default_factory=dict)
    population: Population | None = None
    stale_entries: int = 0  # served from a last good value after a failed reload
    #: A sampled estimate of the bytes the entries hold (None: not estimated).
    bytes_estimate: int | None = None

    @property
    def clearable(self) -> bool:
        """Return whether the buttons clear it (policy `clear`, see `is_clearable`)."""
        return is_clearable(self.policy)

    @property
    def policy_label(self) -> str:
        """Return the word the dashboard uses: "clearable", "preserved", "expired only"."""
        return POLICY_LABELS.get(self.policy, self.policy or "—")

    @property
    def cap_parts(self) -> list[tuple[str, int, int]]:
        """Return (member label, cap, size) per member map; [] for a one-map layer.

        A composite layer's cap is the sum of its members' caps, each from its
        own setting: tomori_state 15,000 = 5,000 main + 5,000 last good + 5,000 errors.
        """
        if len(self.member_caps) < 2:
            return []
        return [
            (
                MEMBER_LABELS.get(label, label.replace("_", " ")),
                cap,
                self.members.get(label, 0),
            )
            for label, cap in self.member_caps.items()
        ]

    @property
    def fill_percent(self) -> float | None:
        """Return size as a percentage of the cap, or None when uncapped."""
        return round(100 * self.size / self.cap, 1) if self.cap else None

    @property
    def hit_rate(self) -> float | None:
        """Return hits / (hits + misses) in percent, or None before any read."""
        reads = self.hits + self.misses
        return round(100 * self.hits / reads, 1) if reads else None

    @property
    def level(self) -> str:
        """Return "danger", "warning" or "ok" for the fill level."""
        fill = self.fill_percent or 0.0
        return (
            "danger"
            if fill >= FILL_DANGER
            else "warning"
            if fill >= FILL_WARNING
            else "ok"
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the row as JSON-ready data (`cache_stats --json`)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        pop = self.population
        data["population"] = (
            None if pop is None else {"label": pop.label, "count": pop.count}
        )
        data.update(
            fill_percent=self.fill_percent, hit_rate=self.hit_rate, level=self.level
        )
        return data


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One live worker: its layers, discord.py counts, memory, bus and catalogs."""

    worker_id: str
    shard_ids: list[int] | None
    published_at: float | None
    started_at: float | None
    layers: list[LayerRow]
    discord: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    bus: dict[str, Any] = field(default_factory=dict)
    catalogs: dict[str, Any] = field(default_factory=dict)
    recent_turns: list[dict[str, Any]] = field(default_factory=list)
    consistency: dict[str, Any] = field(default_factory=dict)
    shard_count: int | None = None
    #: `TrafficFigures` as data ({}: the worker runs no pipeline yet).
    traffic: dict[str, Any] = field(default_factory=dict)
    ready: bool | None = None  # None: the worker serves no readiness probe
    not_ready: list[str] = field(default_factory=list)

    def age_seconds(self, now: float | None = None) -> float | None:
        """Return how long ago the snapshot was published."""
        if self.published_at is None:
            return None
        return max(0.0, (now or time.time()) - self.published_at)

    def uptime_seconds(self, now: float | None = None) -> float | None:
        """Return how long the worker has been running."""
        if self.started_at is None:
            return None
        return max(0.0, (now or time.time()) - self.started_at)

    @property
    def memory_level(self) -> str:
        """Return "danger", "warning" or "ok" from the memory guard's state."""
        state = str(self.memory.get("state") or "").lower()
        return {"critical": "danger", "warning": "warning"}.get(state, "ok")

    @property
    def total_entries(self) -> int:
        """Return the entries resident across every layer."""
        return sum(layer.size for layer in self.layers)

    def as_dict(self) -> dict[str, Any]:
        """Return the worker as JSON-ready data (`cache_stats --json`)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["layers"] = [layer.as_dict() for layer in self.layers]
        return data


def layer_row(
    name: str, stats: CacheStats, population: Population | None = None
) -> LayerRow:
    """Return the row for one cache's stats."""
    return LayerRow(
        name=name,
        description=stats.description,
        policy=stats.policy,
        invalidatable=stats.invalidatable,
        ttl=stats.ttl,
        cap=stats.cap,
        size=stats.size,
        hits=stats.hits,
        misses=stats.misses,
        loads=stats.loads,
        load_failures=stats.load_failures,
        evictions=stats.evictions,
        expirations=stats.expirations,
        invalidations=stats.invalidations,
        last_invalidation=stats.last_invalidation,
        member_caps=dict(stats.member_caps),
        members=dict(stats.members),
        population=population,
        stale_entries=stats.stale_entries,
        bytes_estimate=stats.bytes_estimate,
    )


def worker_view(
    snapshot: WorkerSnapshot, populations: Mapping[str, Population] | None = None
) -> WorkerView:
    """Return the view of one live snapshot."""
    pops = populations or {}
    return WorkerView(
        worker_id=snapshot.worker_id,
        shard_ids=None if snapshot.shard_ids is None else list(snapshot.shard_ids),
        published_at=snapshot.published_at,
        started_at=snapshot.started_at,
        layers=[
            layer_row(name, stats, pops.get(name))
            for name, stats in snapshot.caches.items()
        ],
        discord=dict(snapshot.discord),
        # The templates read libvips' and the heap's figures by name too.
        memory={} if snapshot.memory is None else snapshot.memory.to_json(),
        bus=dict(snapshot.bus),
        catalogs=dict(snapshot.catalogs),
        recent_turns=list(snapshot.recent_turns),
        consistency=dict(snapshot.consistency),
        shard_count=snapshot.shard_count,
        traffic={} if snapshot.traffic is None else snapshot.traffic.to_json(),
        ready=snapshot.ready,
        not_ready=list(snapshot.not_ready),
    )


def format_duration(seconds: float | None) -> str:
    """Return "45 s", "12 min", "3.5 h", "2.0 d" or "—"."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _populations(snapshots: list[WorkerSnapshot]) -> dict[str, Population]:
    """Count, in one query, the population each shown layer declares it is mistaken for."""
    from caches.layers import declared_layers
    from tomori.domain.repositories.population import cache_populations

    layers = declared_layers()
    names = sorted({name for snap in snapshots for name in snap.caches})
    queries = {
        name: (spec.label, spec.rows)
        for name in names
        if name in layers and (spec := layers[name].mistaken_for) is not None
    }
    return cache_populations(queries)


def live_worker_views(*, with_populations: bool = True) -> list[WorkerView]:
    """Return a view of every live worker, with the populations beside each layer.

    Raises LiveDataUnavailable when Redis cannot be read.
    """
    from caches.live import live_snapshots

    snapshots = live_snapshots()
    populations = _populations(snapshots) if with_populations else {}
    return [worker_view(snapshot, populations) for snapshot in snapshots]


@dataclass(frozen=True, slots=True)
class LiveWorkers:
    """The live workers as far as they can be read, and why the rest cannot."""

    workers: list[WorkerView]
    faults: list[str] = field(default_factory=list)
    live: bool = True  # False: Redis could not be read, so no worker is known


def read_live_workers(*, with_populations: bool = True) -> LiveWorkers:
    """Return every live worker's view; a missing Redis or database becomes a fault line."""
    from caches.live import LiveDataUnavailable, live_snapshots

    try:
        snapshots = live_snapshots()
    except LiveDataUnavailable as exc:
        return LiveWorkers([], [str(exc)], live=False)
    faults: list[str] = []
    populations: dict[str, Population] = {}
    try:
        populations = _populations(snapshots) if with_populations else {}
    except DATABASE_ERRORS as exc:
        faults.append(f"{database_fault(exc)} (populations are not shown)")
    views = [worker_view(snapshot, populations) for snapshot in snapshots]
    return LiveWorkers(views, faults)
