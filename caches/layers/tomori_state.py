"""Tomori state cache (spec 1): a server's personas, main first, keyed by server_disc_id."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from caches.core import MISSING, BoundedTTLCache, DoNotCache
from caches.layers._feeds import Feed, server_disc_id_of
from caches.layers._server_value import SERVER_DISC_ID, StaleFallbackMaps
from caches.layers._support import cached, run_db, unwrapped, warm_map
from caches.layers.declaration import (
    GuildBatch,
    Layer,
    LayerSettings,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from tomori.domain.repositories import population
from tomori.domain.repositories import servers as servers_repo
from tomori.domain.repositories.servers import PersonaRecord, TomoriStateRows

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


class TomoriStateMaps(StaleFallbackMaps[int, TomoriState]):
    """The fresh, last-good and database-error maps, by server_disc_id."""

    __slots__ = ("errors",)
    errors: BoundedTTLCache[int, str]

    def members(self, config: LayerSettings) -> dict[str, BoundedTTLCache[int, str]]:
        """Make the map remembering each server's last database error."""
        self.errors = config.cache(
            f"{NAME}:errors", cap=CAP_SETTING, ttl=ERROR_MEMORY_SECONDS
        )
        return {"errors": self.errors}

    def failed(self, key: int, exc: BaseException) -> None:
        """Remember the error (see `tomori_state_database_error`)."""
        self.errors.set(key, f"{type(exc).__name__}: {exc}")


_layer = TomoriStateMaps(
    NAME, cap=CAP_SETTING, ttl=TTL_SETTING, retention=STALE_RETENTION_SECONDS
)


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
    _layer.errors.invalidate(server_disc_id)
    if rows is None:
        return DoNotCache(None)
    return _kept(build_tomori_state(rows))


def _kept(state: TomoriState) -> TomoriState | DoNotCache[TomoriState | None]:
    """Return the state as the layer keeps it."""
    # Not cached: the first persona a server adds must show up at once.
    if not state.personas or state.main_persona is None:
        return DoNotCache(state)
    return state


def _states_of(server_disc_ids: list[int]) -> dict[int, TomoriState]:
    """Return the states the layer would cache of these servers (a warm-up's read)."""
    rows = servers_repo.load_tomori_state_rows_of(server_disc_ids)
    states = {key: _kept(build_tomori_state(r)) for key, r in rows.items()}
    return {k: v for k, v in states.items() if isinstance(v, TomoriState)}


async def _warm(batch: GuildBatch) -> int:
    """Warm a batch of servers' states (two queries); return how many were stored."""
    return await warm_map(_layer.cache, batch.server_disc_ids, _states_of)


async def get_cached_tomori_state(server_disc_id: int) -> TomoriState | None:
    """Return the server's state, loading it on a miss (None: unknown server).

    On a database error, return the last good state if one is kept (even
    past an invalidation: it is served, noted as stale, until a reload
    succeeds), else None, and remember the error (see
    `tomori_state_database_error`).
    """
    state = cached(_layer.fresh, server_disc_id)  # the hit path builds no closure
    if state is not MISSING:
        return state  # type: ignore[no-any-return]
    return await _load_or_stale(server_disc_id)


async def _load_or_stale(server_disc_id: int) -> TomoriState | None:
    state, _failed = await _layer.load_or_stale(
        server_disc_id, lambda: _load(server_disc_id)
    )
    return None if state is MISSING else state  # type: ignore[no-any-return]


async def get_cached_all_personas(server_disc_id: int) -> tuple[PersonaRecord, ...]:
    """Return every persona of the server, main first (empty if none or unknown)."""
    state = cached(_layer.fresh, server_disc_id)
    if state is MISSING:
        state = await _load_or_stale(server_disc_id)
    return state.personas if state is not None else ()


async def get_cached_main_persona(server_disc_id: int) -> PersonaRecord | None:
    """Return the server's main persona, or None."""
    state = cached(_layer.fresh, server_disc_id)
    if state is MISSING:
        state = await _load_or_stale(server_disc_id)
    return state.main_persona if state is not None else None


def tomori_state_database_error(server_disc_id: int) -> str | None:
    """Return the database error of the server's last load, if it failed recently."""
    error = _layer.errors.peek(server_disc_id)
    return None if error is MISSING else error


def invalidate_tomori_state_cache(server_disc_id: int) -> int:
    """Drop the server's state and error; return entries removed.

    The last good copy stays: it answers (as stale) only if the reload fails.
    """
    return _layer.cache.invalidate(server_disc_id)


async def _reload(server_disc_id: int) -> TomoriState | None:
    return unwrapped(await _load(server_disc_id))  # type: ignore[no-any-return]


LAYER = Layer(
    name=NAME,
    guild=SERVER_DISC_ID.guild,
    description="Personas of a server (main first) and its model settings.",
    policy=EmergencyPolicy.CLEAR,
    key=SERVER_DISC_ID.key(lambda s: f"Tomori state of server {s}"),
    feeds=(
        Feed("tomori.Server", "key", ("server_disc_id",)),
        Feed("tomori.ServerModelConfig", "key", (server_disc_id_of(),)),
        Feed("tomori.Persona", "key", (server_disc_id_of(),)),
    ),
    build=_layer.build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec(
        "configured servers (API key set)", population.configured_servers
    ),
    reload=lambda key: _reload(key),
    warm=_warm,
)
