"""Channel system prompt cache (spec 14b): a channel's prompt override, or None.

Keyed by (server_id, channel_disc_id). Channels with no override cache None,
so DM and unconfigured channels cost a single cheap lookup. A database error
answers "no override" and caches nothing.
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
from tomori.repositories.channels import ChannelPromptRecord

logger = logging.getLogger(__name__)

NAME = "channel_prompt"

_cache = new_cache(
    NAME,
    cap_setting="CHANNEL_PROMPT_CACHE_MAX_ENTRIES",
    ttl=minutes_setting("TOMORI_STATE_CACHE_TTL_MINUTES"),
)


async def get_cached_channel_prompt(
    server_id: int, channel_disc_id: int
) -> ChannelPromptRecord | None:
    """Return the channel's {prompt, mode} override, or None (also on a database error)."""
    key = (server_id, channel_disc_id)
    prompt = cached(_cache, key)  # the hit path builds no closure
    if prompt is not MISSING:
        return prompt  # type: ignore[no-any-return]
    try:
        return await _cache.get_or_load(  # type: ignore[no-any-return]
            key,
            lambda: run_db(
                channels_repo.get_channel_prompt_override,
                server_id=server_id,
                channel_disc_id=channel_disc_id,
            ),
        )
    except DatabaseError as exc:
        logger.warning(
            "channel_prompt: override of %s/%s unreadable: %s",
            server_id,
            channel_disc_id,
            exc,
        )
        return None


def invalidate_channel_prompt_cache(
    server_id: int, channel_disc_id: int | None = None
) -> int:
    """Drop one channel's entry, or every entry of the server; return removals."""
    if channel_disc_id is None:
        return _cache.invalidate_where(
            lambda key: isinstance(key, tuple) and key[0] == server_id
        )
    return _cache.invalidate((server_id, channel_disc_id))


def _invalidate_server(server_id: int) -> int:
    return invalidate_channel_prompt_cache(server_id)


registry.register(
    NAME,
    _cache,
    policy=EmergencyPolicy.CLEAR,
    description="Per-channel system prompt overrides ({prompt, mode} or None).",
    key_help="server_id:channel_disc_id (internal server id, Discord channel id)",
    parse_key=parse_int_pair,
    ops={"server": _invalidate_server, "channel": invalidate_channel_prompt_cache},
)
