"""Discord events that change what a cached answer depends on, as registry operations.

Only the worker that owns a guild's shard sees its events, and only that
worker caches the guild's entries, so these apply to the local registry and
are not published on the bus. Every event is made through the layers' declared
operations (checked at import), and every worker builds every layer.

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
from caches.layers import (
    channel_llm,
    channel_prompt,
    channel_whitelist,
    declared_layers,
    emoji_sticker,
    tomori_state,
    webhook,
)
from caches.registry import Event, registry
from tomori.repositories import servers as servers_repo

logger = logging.getLogger(__name__)

# The operations these handlers run, bound (and checked) at import.
_EXPRESSIONS = emoji_sticker.LAYER.op("key")
_WEBHOOKS = webhook.LAYER.op("channel")
_WHITELIST_SERVER = channel_whitelist.LAYER.op("server")
_WHITELIST_CHANNEL = channel_whitelist.LAYER.op("channel")
_LLM_CHANNEL = channel_llm.LAYER.op("channel")
_PROMPT_CHANNEL = channel_prompt.LAYER.op("channel")


def apply(event: Event) -> int:
    """Run `event` on this worker's registry; return entries removed.

    Every event here is made through a declared operation, and the worker
    builds every declared layer, so a failure (an unknown cache included) is
    a bug: logged at ERROR, never raised into the client.
    """
    try:
        return registry.apply(event.cache, event.op, *event.args)
    except Exception:  # an event handler must never break the client
        logger.exception("invalidation %s.%s%r failed", *event)
        return 0


def known_server_id(server_disc_id: int) -> int | None:
    """Return the internal id of a server from the tomori state cache, if it is there."""
    cache: Any = registry.get(tomori_state.NAME)
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
    return 0 if server_id is None else apply(_EXPRESSIONS(server_id))


def webhooks_changed(channel_disc_id: int) -> int:
    """A channel's webhooks changed: drop its webhook and persona entries."""
    return apply(_WEBHOOKS(channel_disc_id))


def role_deleted(server_disc_id: int) -> int:
    """A role of the guild was deleted: drop the guild's whitelist entries."""
    return apply(_WHITELIST_SERVER(server_disc_id))


async def channel_changed(server_disc_id: int, channel_disc_id: int) -> int:
    """A thread was updated or deleted, or a channel deleted: drop its entries.

    The whitelist and LLM `channel` ops also drop the entries of threads
    whose parent is that channel.
    """
    removed = apply(_WHITELIST_CHANNEL(server_disc_id, channel_disc_id))
    server_id = await server_id_of(server_disc_id)
    if server_id is not None:
        removed += apply(_LLM_CHANNEL(server_id, channel_disc_id))
        removed += apply(_PROMPT_CHANNEL(server_id, channel_disc_id))
    return removed


def guild_events(server_disc_id: int, server_id: int | None) -> list[Event]:
    """Return the events dropping one guild's entries from every layer declaring how."""
    events = (
        layer.guild_event(server_id=server_id, server_disc_id=server_disc_id)
        for layer in declared_layers().values()
    )
    return [event for event in events if event is not None]


async def guild_removed(server_disc_id: int, channel_ids: Iterable[int]) -> int:
    """The bot left a guild (or it was deleted): drop every entry of that guild.

    Each layer declares how (`Layer.guild`); webhooks are per channel.
    Short-term memory stays: it is conversational state, not a read-through copy.
    """
    server_id = await server_id_of(server_disc_id)
    removed = sum(apply(event) for event in guild_events(server_disc_id, server_id))
    removed += sum(webhooks_changed(channel_id) for channel_id in channel_ids)
    return removed
