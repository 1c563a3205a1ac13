"""The emergency cache clear: drop recoverable caches under memory pressure, measure it.

Policy comes from the registry (spec "Emergency Memory Cleanup"): caches
marked ``clear`` are emptied, short-term memory (``expired_only``) loses only
its expired entries unless EMERGENCY_CACHE_CLEAR_INCLUDE_STM says otherwise,
and ``preserve`` caches (catalogs, the LLM map, static capability maps) are
left alone, as is runtime coordination state, which is never registered.
With a discord.py client, its volatile caches go too.

A forced collection runs between dropping the references and the "after"
measurement; without it the ``*_delta_clear`` fields read zero, because
dropping a reference frees nothing measurable until the collector runs.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from caches.memory.heap_trim import trim_heap
from caches.memory.readers import read_process_memory
from caches.registry import EmergencyPolicy, RegisteredCache, registry
from caches.telemetry import emit_metric
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

HANDLER_NAME = "emergency_cache_clear"
METRIC_NAME = "emergency_cache_clear"
DISCORD_STEP = "discord_volatile"
TRIM_STEP = "malloc_trim"


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


def _empty() -> Any:
    return field(default_factory=_frozen)


@dataclass(frozen=True)
class EmergencyClearResult:
    """What one emergency clear did: counts, failures, flags and memory figures."""

    source: str | None
    skipped: bool = False
    cleared: Mapping[str, int] = _empty()
    discord_cleared: Mapping[str, int] = _empty()
    preserved: tuple[str, ...] = ()
    failed_steps: Mapping[str, str] = _empty()
    include_stm: bool = False
    discord_volatile: bool = False
    collected: bool = False
    memory_before: Mapping[str, Any] = _empty()
    memory_after: Mapping[str, Any] = _empty()
    duration_ms: float = 0.0
    memory_delta: Mapping[str, Any] = _empty()

    @property
    def total_cleared(self) -> int:
        """Return the entries cleared across registry and discord.py caches."""
        return sum(self.cleared.values()) + sum(self.discord_cleared.values())

    def as_dict(self) -> dict[str, Any]:
        """Return the metric fields: counts, flags, and memory before/after/delta."""
        fields: dict[str, Any] = {
            "source": self.source,
            "skipped": self.skipped,
            "total_cleared": self.total_cleared,
            "cleared": dict(self.cleared),
            "discord_cleared": dict(self.discord_cleared),
            "preserved": list(self.preserved),
            "failed_steps": dict(self.failed_steps),
            "include_stm": self.include_stm,
            "discord_volatile": self.discord_volatile,
            "collected": self.collected,
            "duration_ms": self.duration_ms,
        }
        fields.update({f"{k}_before": v for k, v in self.memory_before.items()})
        fields.update({f"{k}_after": v for k, v in self.memory_after.items()})
        fields.update({f"{k}_delta_clear": v for k, v in self.memory_delta.items()})
        return fields


class EmergencyTotals:
    """What every emergency clear of this process did so far (the metrics endpoint reads it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: Counter[str] = Counter()  # by source
        self.skipped = 0
        self.cleared: Counter[str] = Counter()  # entries, by cache name

    def note(self, result: EmergencyClearResult) -> None:
        """Add one clear's outcome."""
        with self._lock:
            if result.skipped:
                self.skipped += 1
                return
            self.runs[result.source or "unknown"] += 1
            self.cleared.update(result.cleared)
            self.cleared.update(result.discord_cleared)

    def snapshot(self) -> tuple[dict[str, int], int, dict[str, int]]:
        """Return copies of (runs by source, skipped runs, entries cleared by cache)."""
        with self._lock:
            return dict(self.runs), self.skipped, dict(self.cleared)


#: This process's totals.
totals = EmergencyTotals()


def compute_memory_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict:
    """Return after minus before for each numeric figure present in both."""
    delta = {}
    for key, value in after.items():
        old = before.get(key)
        numeric = (int, float)
        if isinstance(value, numeric) and isinstance(old, numeric):
            delta[key] = round(value - old, 3)
    return delta


class _Run:
    """Mutable accumulator for one clear; frozen into the result at the end."""

    def __init__(self) -> None:
        self.cleared: dict[str, int] = {}
        self.discord: dict[str, int] = {}
        self.preserved: list[str] = []
        self.failed: dict[str, str] = {}

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # one failed step must not stop the others
            self.failed[name] = type(exc).__name__
            logger.exception("emergency cache clear: step %s failed", name)
            return None


def _clear_entry(run: _Run, entry: RegisteredCache, *, include_stm: bool) -> None:
    if entry.policy is EmergencyPolicy.PRESERVE:
        run.preserved.append(entry.name)
        return
    cache = entry.cache
    wipe = entry.policy is EmergencyPolicy.CLEAR or include_stm
    removed = run.step(entry.name, cache.clear if wipe else cache.clear_expired)
    if removed is not None:
        run.cleared[entry.name] = removed


def _clear_discord(run: _Run, client: Any) -> None:
    # Imported here: caches/ must not pull in discord.py for the admin process.
    from caches.discord_caches import clear_discord_volatile

    counts = run.step(DISCORD_STEP, lambda: clear_discord_volatile(client))
    if counts is not None:
        run.discord.update(counts)


def clear_emergency_caches(
    *,
    client: Any = None,
    include_short_term_memory: bool | None = None,
    clear_discord_volatile: bool | None = None,
    source: str | None = None,
    collect_before_measuring: bool = True,
) -> EmergencyClearResult:
    """Clear the recoverable caches, measure memory around it, and emit the metric.

    Flags default to the EMERGENCY_CACHE_CLEAR_* settings; with
    EMERGENCY_CACHE_CLEAR_ENABLED false this is a logged no-op. Run it on the
    event-loop thread when ``client`` is given (discord.py's caches live there).
    """
    if not knobs().EMERGENCY_CACHE_CLEAR_ENABLED:
        return _skipped(source)
    if include_short_term_memory is None:
        include_short_term_memory = knobs().EMERGENCY_CACHE_CLEAR_INCLUDE_STM
    if clear_discord_volatile is None:
        clear_discord_volatile = knobs().EMERGENCY_CACHE_CLEAR_DISCORD_VOLATILE
    include_stm = bool(include_short_term_memory)
    discord = client is not None and bool(clear_discord_volatile)
    started = time.perf_counter()
    before = read_process_memory()
    run = _Run()
    for entry in registry.entries():
        _clear_entry(run, entry, include_stm=include_stm)
    if discord:
        _clear_discord(run, client)
    if collect_before_measuring:
        run.step("gc_collect", gc.collect)
        run.step(TRIM_STEP, trim_heap)
    after = read_process_memory()
    result = EmergencyClearResult(
        source=source,
        cleared=_frozen(run.cleared),
        discord_cleared=_frozen(run.discord),
        preserved=tuple(run.preserved),
        failed_steps=_frozen(run.failed),
        include_stm=include_stm,
        discord_volatile=discord,
        collected=collect_before_measuring,
        memory_before=_frozen(before),
        memory_after=_frozen(after),
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
        memory_delta=_frozen(compute_memory_delta(before, after)),
    )
    _report(result)
    return result


def _skipped(source: str | None) -> EmergencyClearResult:
    logger.warning(
        "emergency cache clear skipped: EMERGENCY_CACHE_CLEAR_ENABLED is false"
    )
    result = EmergencyClearResult(source=source, skipped=True)
    totals.note(result)
    emit_metric(METRIC_NAME, result.as_dict())
    return result


def _report(result: EmergencyClearResult) -> None:
    logger.warning(
        "emergency cache clear (%s): %d entries cleared, rss %s -> %s MB, "
        "failed steps: %s",
        result.source,
        result.total_cleared,
        result.memory_before.get("rss_mb"),
        result.memory_after.get("rss_mb"),
        ", ".join(result.failed_steps) or "none",
    )
    totals.note(result)
    emit_metric(METRIC_NAME, result.as_dict())


def install_emergency_handler(
    guard: Any, *, client_getter: Callable[[], Any] | None = None
) -> None:
    """Make ``guard`` run the emergency clear on entering critical.

    Also gives a guard built without ``on_metric`` the metric sink
    (``caches.telemetry.emit_metric``), so ``memory_emergency_entered`` lands
    as a log line and a metric_samples row.
    """
    getter = client_getter or (lambda: None)

    def handler() -> EmergencyClearResult:
        return clear_emergency_caches(client=getter(), source="memory_guard")

    guard.add_emergency_handler(HANDLER_NAME, handler)
    # MemoryGuard takes its sink only in __init__; fill it in when absent.
    if getattr(guard, "_on_metric", None) is None:
        guard._on_metric = emit_metric
