"""ST preset cache: a server's active SillyTavern preset with its nodes, or None."""

from __future__ import annotations

from caches.layers._feeds import Feed, Via
from caches.layers._server_value import ServerValueLayer
from caches.layers.declaration import PopulationSpec
from tomori.domain.repositories import population
from tomori.domain.repositories import presets as presets_repo
from tomori.domain.repositories.presets import StPresetRecord

NAME = "st_preset"

_layer: ServerValueLayer[StPresetRecord | None] = ServerValueLayer(
    NAME,
    cap_setting="ST_PRESET_CACHE_MAX_ENTRIES",
    ttl_setting="ST_PRESET_CACHE_TTL_MINUTES",
    load=lambda server_id: presets_repo.get_active_st_preset(server_id),
    load_of=lambda server_ids: presets_repo.get_active_st_presets(server_ids),
    description="Active ST preset and its nodes per server (None: no active preset).",
    phrase=lambda s: f"ST presets of server #{s}",
    population=PopulationSpec(
        "servers with ST presets", population.servers_with_st_presets
    ),
    feeds=(
        Feed("tomori.StPreset", "key", ("server_id",)),
        Feed(
            "tomori.StPresetNode",
            "key",
            (Via("preset_id", "tomori.StPreset", "server_id"),),
        ),
    ),
)

#: Return the server's active ST preset (None: no active preset).
get_cached_st_preset = _layer.get
#: Drop the server's preset; return entries removed.
invalidate_st_preset_cache = _layer.invalidate

LAYER = _layer.layer
