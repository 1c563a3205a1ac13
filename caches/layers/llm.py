"""LLM model cache (spec 6): the llms table, warmed at start and read synchronously.

`initialize_llm_cache()` loads every row; the readers (`get_cached_llm`,
`get_cached_llms_by_provider`, `get_cached_default_llm`) never touch the
database. A failed warm keeps the previous map. When llms rows change the
"reload" op (or a key invalidation) marks the map for re-warming: it keeps
serving, and the next `ensure_llm_cache()` (called at the start of a turn) or
async read re-warms it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from caches.core import BoundedTTLCache, Clock, SingleFlight
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._feeds import Feed
from caches.layers._maps import LayerMaps
from caches.layers._support import parse_int, run_db
from caches.layers.declaration import (
    KeyShape,
    Layer,
    LayerSettings,
    Operation,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from tomori.domain.repositories import llms as llms_repo
from tomori.domain.repositories import population
from tomori.domain.repositories.llms import LlmRecord

logger = logging.getLogger(__name__)

NAME = "llm"
CAP_SETTING = "LLM_CACHE_MAX_ENTRIES"


def _by_codename(record: LlmRecord) -> tuple[str, str]:
    return (record.provider.lower(), record.codename)


class LlmCache:
    """The llms rows by id, plus provider indexes rebuilt on every warm."""

    def __init__(self, by_id: BoundedTTLCache[int, LlmRecord]) -> None:
        self.by_id = by_id
        self.name = NAME
        self.by_provider: dict[str, tuple[LlmRecord, ...]] = {}
        self.defaults: dict[str, LlmRecord] = {}
        self.ready = False  # a warm has succeeded since the last clear
        self.needs_rewarm = False  # rows changed since the last warm
        self._changes = (
            0  # bumped by every invalidation: a warm that overlaps one is stale
        )
        self._warming: SingleFlight[None, bool] = SingleFlight("llm-warm")

    def install(self, records: Sequence[LlmRecord]) -> None:
        """Replace the map with `records` in one step (no await in between)."""
        if len(records) > self.by_id.maxsize:
            logger.warning("llm: %d rows exceed LLM_CACHE_MAX_ENTRIES", len(records))
        wanted = {r.id for r in records}
        self.by_id.invalidate_where(lambda key: key not in wanted)
        for record in records:
            self.by_id.set(record.id, record)
        self._reindex()
        self.ready, self.needs_rewarm = True, False

    def _reindex(self) -> None:
        by_provider: dict[str, list[LlmRecord]] = {}
        defaults: dict[str, LlmRecord] = {}
        records = [r for _, r in self.by_id.items() if isinstance(r, LlmRecord)]
        for record in sorted(records, key=_by_codename):
            if not record.is_active:
                continue
            provider = record.provider.lower()
            by_provider.setdefault(provider, []).append(record)
            if record.is_default:
                defaults[provider] = record
        self.by_provider = {p: tuple(rs) for p, rs in by_provider.items()}
        self.defaults = defaults

    async def warm(self) -> bool:
        """Reload every row (one warm at a time); on failure keep the current map."""
        return await self._warming.run(None, lambda _flight: self._warm_once())

    async def _warm_once(self) -> bool:
        changes = self._changes
        try:
            records = await run_db(llms_repo.list_llms)
        except DB_ERRORS as exc:  # keep serving the previous map
            database_failed(NAME, exc)
            return False
        self.install(records)
        # Rows read before an invalidation that arrived mid-read may be old:
        # serve them, but warm again at the next access.
        self.needs_rewarm = self._changes != changes
        return True

    def mark_for_rewarm(self) -> int:
        """Keep serving the current map, but re-warm at the next async access."""
        self.needs_rewarm = True
        self._changes += 1
        return 0

    # What the registry needs (ManagedCache).

    def maps(self) -> dict[str, BoundedTTLCache[Any, Any]]:
        """Return the one map by label (the provider indexes are derived from it)."""
        return {"primary": self.by_id}

    def __len__(self) -> int:
        return len(self.by_id)

    def keys(self) -> list[Any]:
        """Return the cached llm ids."""
        return self.by_id.keys()

    def items(self) -> list[tuple[Any, Any]]:
        """Return the cached (llm_id, record) pairs."""
        return self.by_id.items()

    def invalidate(self, key: Any) -> int:
        """Drop one llm and mark the map for re-warming; return removals."""
        removed = self.by_id.invalidate(key)
        self._reindex()
        self.needs_rewarm = True
        self._changes += 1
        return removed

    def clear(self) -> int:
        """Drop every llm; the next async access warms again."""
        removed = self.by_id.clear()
        self.by_provider, self.defaults = {}, {}
        self.ready = False
        self._changes += 1
        return removed

    def clear_expired(self) -> int:
        """Return 0: llm entries do not expire."""
        return self.by_id.clear_expired()

    def stats(self) -> dict[str, Any]:
        """Return the map's stats plus readiness."""
        return {
            **self.by_id.stats(),
            "ready": self.ready,
            "needs_rewarm": self.needs_rewarm,
        }

    def set_clock(self, clock: Clock) -> None:
        """Read time from `clock`."""
        self.by_id.set_clock(clock)


class LlmLayer(LayerMaps):
    """The layer's one `LlmCache`, built from its cap setting (no ttl)."""

    __slots__ = ("cache",)
    cache: LlmCache

    def make(self, config: LayerSettings) -> LlmCache:
        """Make the map by id and its provider indexes."""
        self.cache = LlmCache(config.cache(NAME, cap=CAP_SETTING, ttl=None))
        return self.cache


_layer = LlmLayer(NAME)


async def initialize_llm_cache() -> bool:
    """Warm the map from the llms table; return whether it succeeded."""
    return await _layer.cache.warm()


async def ensure_llm_cache() -> bool:
    """Warm the map if it was never warmed, was cleared or rows changed; return readiness."""
    if not _layer.cache.ready or _layer.cache.needs_rewarm:
        await _layer.cache.warm()
    return _layer.cache.ready


def is_llm_cache_ready() -> bool:
    """Tell whether a warm has succeeded (and the map was not cleared since)."""
    return _layer.cache.ready


def get_cached_llm(llm_id: int) -> LlmRecord | None:
    """Return the llm with this id, or None."""
    return _layer.cache.by_id.get(llm_id, None)


def get_cached_llms_by_provider(provider: str) -> tuple[LlmRecord, ...]:
    """Return the active llms of a provider (case-insensitive), by codename."""
    return _layer.cache.by_provider.get(provider.lower(), ())


def get_cached_default_llm(provider: str) -> LlmRecord | None:
    """Return the provider's active default llm (case-insensitive), or None."""
    return _layer.cache.defaults.get(provider.lower())


async def get_llm(llm_id: int) -> LlmRecord | None:
    """Return the llm with this id, re-warming first if the map needs it."""
    await ensure_llm_cache()
    return get_cached_llm(llm_id)


def mark_llm_cache_for_rewarm() -> int:
    """Keep serving the current map, but re-warm at the next async access."""
    return _layer.cache.mark_for_rewarm()


LAYER = Layer(
    name=NAME,
    description="LLM models by id, warmed at start from the llms table.",
    policy=EmergencyPolicy.PRESERVE,
    key=KeyShape(help="llm_id", parse=parse_int, phrase=lambda i: f"LLM #{i}"),
    feeds=(
        Feed("tomori.Llm", "key", ("id",)),
        Feed("tomori.Llm", "reload"),
    ),
    build=_layer.build,
    settings=(CAP_SETTING,),
    ops=(
        Operation(
            "reload",
            mark_llm_cache_for_rewarm,
            description="Re-warm the whole map at the next access (rows changed).",
            phrase=lambda: "the LLM list (reloaded)",
        ),
    ),
    mistaken_for=PopulationSpec("LLM rows", population.llms),
)
