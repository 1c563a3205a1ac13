"""Emoji/sticker cache (spec 3): a server's stored expressions after a lazy sync check.

Keyed by the internal server_id. Each category is cached on its own terms: a
category disabled when the entry was built is not loaded (its rows are None),
and a caller that finds it enabled later gets it loaded instead of an empty
list. The guild's current emojis and stickers are passed in by the caller as
plain data; the sync they may trigger never raises.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from caches.core import MISSING, SingleFlight
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._feeds import Feed
from caches.layers._maps import OneMap
from caches.layers._server_value import SERVER_ID
from caches.layers._support import cached, run_db, warm_map
from caches.layers.declaration import GuildBatch, Layer, PopulationSpec
from caches.registry import EmergencyPolicy
from tomori.domain.repositories import expressions as expressions_repo
from tomori.domain.repositories import population
from tomori.domain.repositories.expressions import (
    ExpressionRecord,
    ExpressionSyncState,
    GuildExpression,
    StoredExpressions,
)

logger = logging.getLogger(__name__)

NAME = "emoji_sticker"
#: A stored count this far from the guild's means the stored rows are stale.
SYNC_COUNT_TOLERANCE = 2
#: A sync older than this is redone at the next load.
SYNC_MAX_AGE = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class GuildExpressions:
    """The emojis and stickers a guild has now, as the caller read them."""

    emojis: Sequence[GuildExpression]
    stickers: Sequence[GuildExpression]


CAP_SETTING = "EMOJI_STICKER_CACHE_MAX_ENTRIES"
TTL_SETTING = "EMOJI_STICKER_CACHE_TTL_MINUTES"

_layer: OneMap[int, StoredExpressions] = OneMap(NAME, cap=CAP_SETTING, ttl=TTL_SETTING)


_syncs: SingleFlight[int, None] = SingleFlight("emoji-sync")


def expressions_of(
    entry: StoredExpressions,
) -> tuple[tuple[ExpressionRecord, ...], ...]:
    """Return (emojis, stickers) with a disabled category as an empty tuple."""
    return (entry.emojis or (), entry.stickers or ())


def needs_sync(
    state: ExpressionSyncState | None,
    guild: GuildExpressions,
    *,
    now: datetime,
    force: bool = False,
) -> bool:
    """Tell whether the stored expressions must be re-synced from the guild's."""
    if force or state is None or state.last_synced_at is None:
        return True
    if abs(state.emoji_count - len(guild.emojis)) > SYNC_COUNT_TOLERANCE:
        return True
    if abs(state.sticker_count - len(guild.stickers)) > SYNC_COUNT_TOLERANCE:
        return True
    return now - state.last_synced_at > SYNC_MAX_AGE


def _sync_if_needed(server_id: int, guild: GuildExpressions, force: bool) -> bool:
    state = expressions_repo.get_expression_sync_state(server_id)
    if not needs_sync(state, guild, now=timezone.now(), force=force):
        return False
    expressions_repo.sync_server_expressions(
        server_id=server_id, emojis=guild.emojis, stickers=guild.stickers
    )
    return True


async def _run_sync(server_id: int, guild: GuildExpressions, force: bool) -> None:
    try:
        if await run_db(_sync_if_needed, server_id, guild, force):
            logger.info("emoji_sticker: synced server %s", server_id)
    except DB_ERRORS as exc:
        database_failed(NAME, exc)
    except Exception:  # the sync must never break the turn that triggered it
        logger.exception("emoji_sticker: sync of server %s failed", server_id)


async def _sync_once(server_id: int, guild: GuildExpressions, force: bool) -> None:
    # Concurrent misses of one server share one sync check (single flight).
    await _syncs.run(server_id, lambda _flight: _run_sync(server_id, guild, force))


def _lacks_enabled(
    entry: StoredExpressions, emoji_enabled: bool | None, sticker_enabled: bool | None
) -> bool:
    return (emoji_enabled is True and entry.emojis is None) or (
        sticker_enabled is True and entry.stickers is None
    )


async def load_emoji_sticker_cache(
    server_id: int,
    *,
    guild: GuildExpressions | Callable[[], GuildExpressions] | None = None,
    force_sync: bool = False,
    emoji_enabled: bool | None = None,
    sticker_enabled: bool | None = None,
) -> StoredExpressions:
    """Return the server's stored expressions, syncing and loading on a miss.

    Pass the server's enabled flags when known (they then also decide what a
    load reads); a flag left None is read from the server row. Pass `guild`
    (or a function returning it, called only on a miss: a hit then builds
    nothing) for the sync check to run; `force_sync` syncs and reloads even
    on a hit.
    """
    entry = cached(_layer.cache, server_id)
    if entry is not MISSING:
        if not force_sync and not _lacks_enabled(entry, emoji_enabled, sticker_enabled):
            return _apply_flags(entry, emoji_enabled, sticker_enabled)
        _layer.cache.invalidate(server_id)
    if guild is not None:
        if not isinstance(guild, GuildExpressions):
            guild = guild()
        await _sync_once(server_id, guild, force_sync)
    entry = await _layer.cache.get_or_load(
        server_id,
        lambda: run_db(
            expressions_repo.load_stored_expressions,
            server_id,
            emoji_enabled=emoji_enabled,
            sticker_enabled=sticker_enabled,
        ),
    )
    return _apply_flags(entry, emoji_enabled, sticker_enabled)


def _apply_flags(
    entry: StoredExpressions, emoji_enabled: bool | None, sticker_enabled: bool | None
) -> StoredExpressions:
    """Hide a category the caller reports disabled (rows loaded while it was on)."""
    hide_emojis = emoji_enabled is False and entry.emojis is not None
    hide_stickers = sticker_enabled is False and entry.stickers is not None
    if not (hide_emojis or hide_stickers):
        return entry
    return dataclasses.replace(
        entry,
        emoji_enabled=entry.emoji_enabled and not hide_emojis,
        emojis=None if hide_emojis else entry.emojis,
        sticker_enabled=entry.sticker_enabled and not hide_stickers,
        stickers=None if hide_stickers else entry.stickers,
    )


async def _warm(batch: GuildBatch) -> int:
    """Warm a batch of servers' stored expressions (two queries); return how many.

    The lazy sync check against the guild's own emojis runs at the entry's
    next miss (the guild is not known before the gateway is ready); Discord's
    emoji and sticker updates drop the entry meanwhile, as always.
    """
    return await warm_map(
        _layer.cache, batch.server_ids, expressions_repo.load_stored_expressions_of
    )


def invalidate_emoji_sticker_cache(server_id: int) -> int:
    """Drop the server's expressions; return entries removed."""
    return _layer.cache.invalidate(server_id)


LAYER = Layer(
    name=NAME,
    guild=SERVER_ID.guild,
    description="Stored emojis and stickers per server (after the lazy sync check).",
    policy=EmergencyPolicy.CLEAR,
    key=SERVER_ID.key(lambda s: f"emojis and stickers of server #{s}"),
    feeds=(
        Feed(
            "tomori.Server",
            "key",
            ("id",),
            fields=("emoji_usage_enabled", "sticker_usage_enabled"),
        ),
        Feed("tomori.ServerExpression", "key", ("server_id",)),
        Feed("tomori.ServerExpressionSync", "key", ("server_id",)),
    ),
    build=_layer.build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec("servers", population.servers),
    warm=_warm,
)
