"""Discord events that change what a cached answer depends on, as registry operations.

Only the worker that owns a guild's shard sees its events, and only that
worker caches the guild's entries, so these apply to the local registry and
are not published on the bus. A worker without a layer skips it.

Roles: a whitelist entry's key carries the member's role signature, so a
member gaining or losing a role asks a different key and needs no
invalidation (the old key ages out under the TTL and the cap). The decision
depends on role ids only, never on a role's name, colour, permissions or
position, so a role update changes no answer either (and a role reorder fires
one update per role: flushing on each would be a storm). A role deletion is
the one role change acted on: every cached signature holding that id is now
unreachable, so the server's entries are dropped to free them at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from caches.core import MISSING
from caches.database import run_db
from caches.registry import registry
from tomori.repositories import servers as servers_repo

logger = logging.getLogger(__name__)

#: Caches keyed by the internal server id that hold one guild's entries.
_SERVER_ID_KEYED = (
    "emoji_sticker",
    "guild_mcp_config",
    "st_preset",
    "novelai_subscription",
)


def apply(cache: str, op: str, *args: Any) -> int:
    """Run `op(*args)` on `cache` if this worker has it; return entries removed."""
    if cache not in registry:
        return 0
    try:
        return registry.apply(cache, op, *args)
    except Exception:  # an event handler must never break the client
        logger.exception("invalidation %s.%s%r failed", cache, op, args)
        return 0


def known_server_id(server_disc_id: int) -> int | None:
    """Return the internal id of a server from the tomori state cache, if it is there."""
    if "tomori_state" not in registry:
        return None
    cache: Any = registry.get("tomori_state")
    state = cache.peek(server_disc_id, MISSING)
    if state is MISSING and hasattr(cache, "stale"):
        state = cache.stale(server_disc_id)
    return None if state in (MISSING, None) else state.server_id


async def server_id_of(server_disc_id: int) -> int | None:
    """Return a server's internal id: cached if possible, else one query (None: unknown)."""
    server_id = known_server_id(server_disc_id)
    if server_id is not None:
        return server_id
    record = await run_db(servers_repo.get_server_by_disc_id, server_disc_id)
    return None if record is None else record.id


async def expressions_changed(server_disc_id: int) -> int:
    """A guild's emojis or stickers changed: drop its stored-expressions entry."""
    server_id = await server_id_of(server_disc_id)
    return 0 if server_id is None else apply("emoji_sticker", "key", server_id)


def webhooks_changed(channel_disc_id: int) -> int:
    """A channel's webhooks changed: drop its webhook and persona entries."""
    return apply("webhook", "channel", channel_disc_id)


def role_deleted(server_disc_id: int) -> int:
    """A role of the guild was deleted: drop the guild's whitelist entries."""
    return apply("channel_whitelist", "server", server_disc_id)


async def channel_changed(server_disc_id: int, channel_disc_id: int) -> int:
    """A thread was updated or deleted, or a channel deleted: drop its entries.

    The whitelist and LLM `channel` ops also drop the entries of threads
    whose parent is that channel.
    """
    removed = apply("channel_whitelist", "channel", server_disc_id, channel_disc_id)
    server_id = await server_id_of(server_disc_id)
    if server_id is not None:
        removed += apply("channel_llm", "channel", server_id, channel_disc_id)
        removed += apply("channel_prompt", "channel", server_id, channel_disc_id)
    return removed


async def guild_removed(server_disc_id: int, channel_ids: Iterable[int]) -> int:
    """The bot left a guild (or it was deleted): drop every entry of that guild.

    Short-term memory stays: it is conversational state, not a read-through copy.
    """
    server_id = await server_id_of(server_disc_id)
    removed = apply("tomori_state", "key", server_disc_id)
    removed += apply("user", "blacklist_server", server_disc_id)
    removed += apply("channel_whitelist", "server", server_disc_id)
    if server_id is not None:
        removed += sum(apply(name, "key", server_id) for name in _SERVER_ID_KEYED)
        removed += apply("channel_llm", "server", server_id)
        removed += apply("channel_prompt", "server", server_id)
        removed += apply("personal_spotlight", "spotlight", server_id, None, None)
    removed += sum(webhooks_changed(channel_id) for channel_id in channel_ids)
    return removed
