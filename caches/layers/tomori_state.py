"""Tomori state cache (spec 1): a server's personas, main first, keyed by server_disc_id."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from caches.core import MISSING, BoundedTTLCache, DoNotCache
from caches.db_outage import DB_ERRORS, database_failed, served_stale
from caches.layers._feeds import Feed, server_disc_id_of
from caches.layers._support import (
    StaleFallbackCache,
    cached,
    parse_int,
    run_db,
    unwrapped,
)
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
from tomori.repositories import servers as servers_repo
from tomori.repositories.servers import PersonaRecord, TomoriStateRows

NAME = "tomori_state"
#: How long a database error is remembered, so callers can tell "database
#: down" from "not configured" for a little while after an empty answer.
ERROR_MEMORY_SECONDS = 60.0
#: How long a server's last good state stays available for a failed reload.
STALE_RETENTION_SECONDS = 6 * 3600.0


@dataclass(frozen=True, slots=True)
class TomoriState:
    """A configured server's settings and personas (main persona first)."""

    server_id: int
    server_disc_id: int
    tool_use_enabled: bool
    emoji_usage_enabled: bool
    sticker_usage_enabled: bool
    channel_whitelist_enabled: bool
    configured: bool  # the server has an API key
    llm_id: int | None  # the server's LLM
    temperature: float
    personas: tuple[PersonaRecord, ...]
    main_persona: PersonaRecord | None


CAP_SETTING = "TOMORI_STATE_CACHE_MAX_ENTRIES"
TTL_SETTING = "TOMORI_STATE_CACHE_TTL_MINUTES"

# Set by _build when the registry is built.
_errors: BoundedTTLCache[int, str] = unbuilt(NAME)
_fresh: BoundedTTLCache[int, TomoriState] = unbuilt(NAME)
_cache: StaleFallbackCache = unbuilt(NAME)


def _build(config: LayerSettings) -> StaleFallbackCache:
    """Build the fresh, last-good and error maps from the layer's settings."""
    global _errors, _fresh, _cache
    _errors = config.cache(f"{NAME}:errors", cap=CAP_SETTING, ttl=ERROR_MEMORY_SECONDS)
    _fresh = config.cache(NAME, cap=CAP_SETTING, ttl=config.minutes(TTL_SETTING))
    _cache = StaleFallbackCache(
        _fresh, retention=STALE_RETENTION_SECONDS, errors=_errors
    )
    return _cache


def build_tomori_state(rows: TomoriStateRows) -> TomoriState:
    """Build the cached state; with tool use off, no persona reports tool support."""
    server, config = rows.server, rows.model_config
    personas = rows.personas
    if not server.tool_use_enabled:
        personas = tuple(dataclasses.replace(p, tools_enabled=False) for p in personas)
    return TomoriState(
        server_id=server.id,
        server_disc_id=server.server_disc_id,
        tool_use_enabled=server.tool_use_enabled,
        emoji_usage_enabled=server.emoji_usage_enabled,
        sticker_usage_enabled=server.sticker_usage_enabled,
        channel_whitelist_enabled=server.channel_whitelist_enabled,
        configured=config is not None and config.configured,
        llm_id=config.llm_id if config is not None else None,
        temperature=config.temperature if config is not None else 1.0,
        personas=personas,
        main_persona=next((p for p in personas if p.is_main), None),
    )


async def _load(server_disc_id: int) -> TomoriState | DoNotCache[TomoriState | None]:
    rows = await run_db(servers_repo.load_tomori_state_rows, server_disc_id)
    _errors.invalidate(server_disc_id)
    if rows is None:
        return DoNotCache(None)
    state = build_tomori_state(rows)
    # Not cached: the first persona a server adds must show up at once.
    if not state.personas or state.main_persona is None:
        return DoNotCache(state)
    return state


async def get_cached_tomori_state(server_disc_id: int) -> TomoriState | None:
    """Return the server's state, loading it on a miss (None: unknown server).

    On a database error, return the last good state if one is kept (even
    past an invalidation: it is served, noted as stale, until a reload
    succeeds), else None, and remember the error (see
    `tomori_state_database_error`).
    """
    state = cached(_fresh, server_disc_id)  # the hit path builds no closure
    if state is not MISSING:
        return state  # type: ignore[no-any-return]
    return await _load_or_stale(server_disc_id)


async def _load_or_stale(server_disc_id: int) -> TomoriState | None:
    try:
        return await _cache.get_or_load(server_disc_id, lambda: _load(server_disc_id))  # type: ignore[no-any-return]
    except DB_ERRORS as exc:
        database_failed(NAME, exc)
        _errors.set(server_disc_id, f"{type(exc).__name__}: {exc}")
        stale = _cache.fallback(server_disc_id)
        if stale is MISSING:
            return None
        served_stale(NAME)
        return stale  # type: ignore[no-any-return]


async def get_cached_all_personas(server_disc_id: int) -> tuple[PersonaRecord, ...]:
    """Return every persona of the server, main first (empty if none or unknown)."""
    state = cached(_fresh, server_disc_id)
    if state is MISSING:
        state = await _load_or_stale(server_disc_id)
    return state.personas if state is not None else ()


async def get_cached_main_persona(server_disc_id: int) -> PersonaRecord | None:
    """Return the server's main persona, or None."""
    state = cached(_fresh, server_disc_id)
    if state is MISSING:
        state = await _load_or_stale(server_disc_id)
    return state.main_persona if state is not None else None


def tomori_state_database_error(server_disc_id: int) -> str | None:
    """Return the database error of the server's last load, if it failed recently."""
    error = _errors.peek(server_disc_id)
    return None if error is MISSING else error


def invalidate_tomori_state_cache(server_disc_id: int) -> int:
    """Drop the server's state and error; return entries removed.

    The last good copy stays: it answers (as stale) only if the reload fails.
    """
    return _cache.invalidate(server_disc_id)


async def _reload(server_disc_id: int) -> TomoriState | None:
    return unwrapped(await _load(server_disc_id))  # type: ignore[no-any-return]


LAYER = Layer(
    name=NAME,
    guild=GuildScope("key", "server_disc_id"),
    description="Personas of a server (main first) and its model settings.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="server_disc_id (the Discord guild id), e.g. 123456789012345678",
        parse=parse_int,
        phrase=lambda s: f"Tomori state of server {s}",
    ),
    feeds=(
        Feed("tomori.Server", "key", ("server_disc_id",)),
        Feed("tomori.ServerModelConfig", "key", (server_disc_id_of(),)),
        Feed("tomori.Persona", "key", (server_disc_id_of(),)),
    ),
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec(
        "configured servers (API key set)", population.configured_servers
    ),
    reload=lambda key: _reload(key),
)
