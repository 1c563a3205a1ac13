"""ST preset cache: a server's active SillyTavern preset with its nodes, or None."""

from __future__ import annotations

from caches.core import MISSING
from caches.layers._support import (
    cached,
    minutes_setting,
    new_cache,
    parse_int,
    run_db,
)
from caches.registry import EmergencyPolicy, registry
from tomori.repositories import presets as presets_repo
from tomori.repositories.presets import StPresetRecord

NAME = "st_preset"

_cache = new_cache(
    NAME,
    cap_setting="ST_PRESET_CACHE_MAX_ENTRIES",
    ttl=minutes_setting("ST_PRESET_CACHE_TTL_MINUTES"),
)


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


registry.register(
    NAME,
    _cache,
    policy=EmergencyPolicy.CLEAR,
    description="Active ST preset and its nodes per server (None: no active preset).",
    key_help="server_id (the internal server id)",
    parse_key=parse_int,
    reload=lambda key: run_db(presets_repo.get_active_st_preset, key),
)
