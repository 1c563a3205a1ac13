"""Channel LLM override cache: which LLM a channel uses instead of the server's.

Keyed by (server_id, channel_disc_id); a channel with no override is cached as
None so unconfigured channels cost one lookup. Each entry holds only that
channel's own override, and a thread without one inherits its parent's at
read time, so a parent's change reaches its threads with no entry of theirs
to drop. A database error answers "no override" and caches nothing.
"""

from __future__ import annotations

import logging

from django.db import Error as DatabaseError

from caches.core import MISSING
from caches.layers._support import (
    cached,
    minutes_setting,
    new_cache,
    parse_int_pair,
    run_db,
)
from caches.registry import EmergencyPolicy, registry
from tomori.repositories import channels as channels_repo

logger = logging.getLogger(__name__)

NAME = "channel_llm"

_cache = new_cache(
    NAME,
    cap_setting="CHANNEL_LLM_CACHE_MAX_ENTRIES",
    ttl=minutes_setting("TOMORI_STATE_CACHE_TTL_MINUTES"),
)


def _load_own(server_id: int, channel_disc_id: int) -> int | None:
    overrides = channels_repo.get_channel_llm_overrides(
        server_id=server_id, channel_disc_ids=[channel_disc_id]
    )
    return overrides.get(channel_disc_id)


async def _own_override(server_id: int, channel_disc_id: int) -> int | None:
    key = (server_id, channel_disc_id)
    llm_id = cached(_cache, key)  # the hit path builds no closure
    if llm_id is not MISSING:
        return llm_id  # type: ignore[no-any-return]
    return await _cache.get_or_load(  # type: ignore[no-any-return]
        key, lambda: run_db(_load_own, server_id, channel_disc_id)
    )


async def get_cached_channel_llm(
    server_id: int, channel_disc_id: int, *, parent_disc_id: int | None = None
) -> int | None:
    """Return the llm_id the channel (or a thread's parent) overrides with, or None."""
    try:
        llm_id = await _own_override(server_id, channel_disc_id)
        if llm_id is None and parent_disc_id is not None:
            llm_id = await _own_override(server_id, parent_disc_id)
    except DatabaseError as exc:
        logger.warning(
            "channel_llm: override of %s/%s unreadable, using the server's: %s",
            server_id,
            channel_disc_id,
            exc,
        )
        return None
    return llm_id


def invalidate_channel_llm_cache(
    server_id: int, channel_disc_id: int | None = None
) -> int:
    """Drop one channel's entry, or every entry of the server; return removals."""
    if channel_disc_id is None:
        return _cache.invalidate_where(
            lambda key: isinstance(key, tuple) and key[0] == server_id
        )
    return _cache.invalidate((server_id, channel_disc_id))


def _invalidate_server(server_id: int) -> int:
    return invalidate_channel_llm_cache(server_id)


registry.register(
    NAME,
    _cache,
    policy=EmergencyPolicy.CLEAR,
    description="Per-channel LLM overrides (None: the channel uses the server's LLM).",
    key_help="server_id:channel_disc_id (internal server id, Discord channel id)",
    parse_key=parse_int_pair,
    ops={"server": _invalidate_server, "channel": invalidate_channel_llm_cache},
)
