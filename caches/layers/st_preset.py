"""ST preset cache: a server's active SillyTavern preset with its nodes, or None."""

from __future__ import annotations

from typing import Any

from caches.core import MISSING, BoundedTTLCache
from caches.layers._support import cached, parse_int, run_db
from caches.layers.declaration import (
    GuildScope,
    KeyShape,
    Layer,
    LayerSettings,
    PopulationSpec,
    unbuilt,
)
from caches.registry import EmergencyPolicy
from tomori.repositories import population
from tomori.repositories import presets as presets_repo
from tomori.repositories.presets import StPresetRecord

NAME = "st_preset"

CAP_SETTING = "ST_PRESET_CACHE_MAX_ENTRIES"
TTL_SETTING = "ST_PRESET_CACHE_TTL_MINUTES"

_cache: BoundedTTLCache[int, Any] = unbuilt(NAME)  # set by _build


def _build(config: LayerSettings) -> BoundedTTLCache[int, Any]:
    """Build the layer's map from its settings."""
    global _cache
    _cache = config.cache(NAME, cap=CAP_SETTING, ttl=config.minutes(TTL_SETTING))
    return _cache


async def get_cached_st_preset(server_id: int) -> StPresetRecord | None:
    """Return the server's active ST preset (None: no active preset)."""
    preset = cached(_cache, server_id)  # the hit path builds no closure
    if preset is not MISSING:
        return preset  # type: ignore[no-any-return]
    return await _cache.get_or_load(  # type: ignore[no-any-return]
        server_id, lambda: run_db(presets_repo.get_active_st_preset, server_id)
    )


def invalidate_st_preset_cache(server_id: int) -> int:
    """Drop the server's preset; return entries removed."""
    return _cache.invalidate(server_id)


LAYER = Layer(
    name=NAME,
    guild=GuildScope("key", "server_id"),
    description="Active ST preset and its nodes per server (None: no active preset).",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="server_id (the internal server id)",
        parse=parse_int,
        phrase=lambda s: f"ST presets of server #{s}",
    ),
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec(
        "servers with ST presets", population.servers_with_st_presets
    ),
    reload=lambda key: run_db(presets_repo.get_active_st_preset, key),
)
