"""Guild MCP config cache: a guild's MCP servers, with where the answer came from.

Keyed by server_id. Provenance is "fresh" (loaded within the TTL), "stale"
(the reload failed, so the last good configs are served, also after an
invalidation until a reload succeeds) or "unavailable" (the load failed and
nothing good was known). Only tool-name snapshot and
enabled/url/name changes invalidate it; display metadata is not cached.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from caches.core import MISSING
from caches.layers._feeds import Feed
from caches.layers._server_value import SERVER_ID, StaleFallbackMaps
from caches.layers._support import cached, run_db, warm_map
from caches.layers.declaration import GuildBatch, Layer, PopulationSpec
from caches.registry import EmergencyPolicy
from tomori.domain.repositories import integrations as integrations_repo
from tomori.domain.repositories import population
from tomori.domain.repositories.integrations import McpServerConfigRecord

NAME = "guild_mcp_config"
STALE_RETENTION_SECONDS = 24 * 3600.0

Provenance = Literal["fresh", "stale", "unavailable"]


@dataclass(frozen=True, slots=True)
class GuildMcpConfigs:
    """A guild's MCP server configs and whether they are current."""

    server_id: int
    configs: tuple[McpServerConfigRecord, ...]
    provenance: Provenance = "fresh"

    @property
    def enabled(self) -> tuple[McpServerConfigRecord, ...]:
        """Return the enabled configs only."""
        return tuple(c for c in self.configs if c.enabled)


CAP_SETTING = "GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES"
TTL_SETTING = "GUILD_MCP_CONFIG_CACHE_TTL_MINUTES"

_layer: StaleFallbackMaps[int, GuildMcpConfigs] = StaleFallbackMaps(
    NAME, cap=CAP_SETTING, ttl=TTL_SETTING, retention=STALE_RETENTION_SECONDS
)


async def _load(server_id: int) -> GuildMcpConfigs:
    configs = await run_db(integrations_repo.list_guild_mcp_configs, server_id)
    return GuildMcpConfigs(server_id=server_id, configs=configs)


def _configs_of(server_ids: list[int]) -> dict[int, GuildMcpConfigs]:
    """Return the configs the layer would cache of these guilds (a warm-up's read)."""
    found = integrations_repo.list_guild_mcp_configs_of(server_ids)
    return {s: GuildMcpConfigs(server_id=s, configs=c) for s, c in found.items()}


async def _warm(batch: GuildBatch) -> int:
    """Warm a batch of guilds' configs (one query); return how many were stored."""
    return await warm_map(_layer.cache, batch.server_ids, _configs_of)


async def get_cached_guild_mcp_configs(server_id: int) -> GuildMcpConfigs:
    """Return the guild's MCP configs; on a failed reload the last good ones, as stale."""
    fresh = cached(_layer.fresh, server_id)  # the hit path builds no closure
    if fresh is not MISSING:
        return fresh  # type: ignore[no-any-return]
    configs, failed = await _layer.load_or_stale(server_id, lambda: _load(server_id))
    if not failed:
        return configs  # type: ignore[no-any-return]
    if configs is MISSING:
        return GuildMcpConfigs(
            server_id=server_id, configs=(), provenance="unavailable"
        )
    return dataclasses.replace(configs, provenance="stale")


def invalidate_guild_mcp_config_cache(server_id: int) -> int:
    """Drop the guild's fresh configs (the last good copy stays); return removals."""
    return _layer.cache.invalidate(server_id)


LAYER = Layer(
    name=NAME,
    guild=SERVER_ID.guild,
    description="MCP server configs per guild (fresh, or stale after a failed reload).",
    policy=EmergencyPolicy.CLEAR,
    key=SERVER_ID.key(lambda s: f"MCP configuration of server #{s}"),
    # display_metadata and tool_names_updated_at are not served from the cache.
    feeds=(
        Feed(
            "tomori.GuildMcpServerConfig",
            "key",
            ("server_id",),
            fields=("tool_names", "enabled", "url", "name"),
        ),
    ),
    build=_layer.build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec(
        "servers with MCP servers", population.servers_with_mcp_servers
    ),
    reload=_load,
    warm=_warm,
)
