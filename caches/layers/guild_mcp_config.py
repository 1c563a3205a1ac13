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

from caches.core import MISSING, BoundedTTLCache
from caches.db_outage import DB_ERRORS, database_failed, served_stale
from caches.layers._support import (
    StaleFallbackCache,
    cached,
    minutes_setting,
    new_cache,
    parse_int,
    run_db,
)
from caches.registry import EmergencyPolicy, registry
from tomori.repositories import integrations as integrations_repo
from tomori.repositories.integrations import McpServerConfigRecord

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


_fresh: BoundedTTLCache[int, GuildMcpConfigs] = new_cache(
    NAME,
    cap_setting="GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES",
    ttl=minutes_setting("GUILD_MCP_CONFIG_CACHE_TTL_MINUTES"),
)
_cache = StaleFallbackCache(_fresh, retention=STALE_RETENTION_SECONDS)


async def _load(server_id: int) -> GuildMcpConfigs:
    configs = await run_db(integrations_repo.list_guild_mcp_configs, server_id)
    return GuildMcpConfigs(server_id=server_id, configs=configs)


async def get_cached_guild_mcp_configs(server_id: int) -> GuildMcpConfigs:
    """Return the guild's MCP configs; on a failed reload the last good ones, as stale."""
    fresh = cached(_fresh, server_id)  # the hit path builds no closure
    if fresh is not MISSING:
        return fresh  # type: ignore[no-any-return]
    try:
        return await _cache.get_or_load(server_id, lambda: _load(server_id))  # type: ignore[no-any-return]
    except DB_ERRORS as exc:
        database_failed(NAME, exc)
        stale = _cache.fallback(server_id)
        if stale is MISSING:
            return GuildMcpConfigs(
                server_id=server_id, configs=(), provenance="unavailable"
            )
        served_stale(NAME)
        return dataclasses.replace(stale, provenance="stale")


def invalidate_guild_mcp_config_cache(server_id: int) -> int:
    """Drop the guild's fresh configs (the last good copy stays); return removals."""
    return _cache.invalidate(server_id)


registry.register(
    NAME,
    _cache,
    policy=EmergencyPolicy.CLEAR,
    description="MCP server configs per guild (fresh, or stale after a failed reload).",
    key_help="server_id (the internal server id)",
    parse_key=parse_int,
    reload=_load,
)
