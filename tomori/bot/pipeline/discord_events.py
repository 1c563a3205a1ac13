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

import asyncio
import logging
from collections.abc import Hashable, Iterable
from time import perf_counter
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
from caches.layers.declaration import Layer
from caches.registry import Event, registry
from tomori.domain.repositories import servers as servers_repo

logger = logging.getLogger(__name__)

#: How long a guild drain works before the event loop gets a turn.
DRAIN_BUDGET_SECONDS = 0.0003
#: Entries dropped between two looks at the clock.
_CLOCK_EVERY = 16
#: Channels whose webhook entries are dropped between two turns of the loop.
CHANNELS_PER_TURN = 64

# The operations these handlers run, bound (and checked) at import.
_EXPRESSIONS = emoji_sticker.LAYER.op("key")
_WEBHOOKS = webhook.LAYER.op("channel")
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


async def role_deleted(server_disc_id: int) -> int:
    """A role of the guild was deleted: drop the guild's whitelist entries (in slices)."""
    return await drop_guild(
        channel_whitelist.LAYER, server_id=None, server_disc_id=server_disc_id
    )


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

    Each layer declares how (`Layer.guild`); webhooks are per channel. The
    loop gets a turn whenever DRAIN_BUDGET_SECONDS of work have passed, so a
    guild holding thousands of entries never blocks it for long.
    Short-term memory stays: it is conversational state, not a read-through copy.
    """
    server_id = await server_id_of(server_disc_id)
    turns = LoopTurns()
    removed = 0
    for layer in declared_layers().values():
        removed += await drop_guild(
            layer, server_id=server_id, server_disc_id=server_disc_id, turns=turns
        )
    for channel_id in channel_ids:
        removed += await drain_scope(webhook.NAME, "channel", channel_id, turns=turns)
        removed += webhooks_changed(channel_id)
        await turns.check()
    return removed


class LoopTurns:
    """Gives the event loop a turn whenever `budget` seconds of work have passed."""

    def __init__(self, budget: float | None = None) -> None:
        self.budget = DRAIN_BUDGET_SECONDS if budget is None else budget
        self.deadline = perf_counter() + self.budget

    async def check(self) -> None:
        """Yield to the loop if this stretch of work has used its budget."""
        if perf_counter() >= self.deadline:
            await self.give()

    async def give(self) -> None:
        """Yield to the loop now (before a step whose cost is not sliced)."""
        await asyncio.sleep(0)
        self.deadline = perf_counter() + self.budget


async def drop_guild(
    layer: Layer,
    *,
    server_id: int | None,
    server_disc_id: int,
    turns: LoopTurns | None = None,
) -> int:
    """Drop one guild's entries from `layer`: its scope drained, then its operation."""
    event = layer.guild_event(server_id=server_id, server_disc_id=server_disc_id)
    if event is None:
        return 0
    turns = turns or LoopTurns()
    removed = 0
    if layer.guild is not None and layer.guild.scope is not None:
        removed += await drain_scope(
            layer.name, layer.guild.scope, event.args[0], turns=turns
        )
    removed += apply(event)  # what the scope does not hold (a gate, a last good copy)
    await turns.check()
    return removed


async def drain_scope(
    cache_name: str, scope: str, value: Hashable, *, turns: LoopTurns
) -> int:
    """Drop the entries whose `scope` holds `value`, giving the loop its turns.

    Only for entries nobody can ask for any more (a guild the bot left, role
    signatures holding a deleted role): between two turns the loop runs, and
    the rest of the scope is still cached.
    """
    removed = 0
    for store in _stores_with_scope(registry.get(cache_name), scope):
        await turns.give()  # listing the scope is one step: start it afresh
        for count, key in enumerate(store.keys_in_scope(scope, value), start=1):
            removed += store.invalidate(key)
            if count % _CLOCK_EVERY == 0:
                await turns.check()
    return removed


def _stores_with_scope(cache: Any, scope: str) -> list[Any]:
    stores = list(cache.maps().values())
    found = [store for store in stores if scope in getattr(store, "scope_names", ())]
    if not found:
        raise KeyError(f"cache {cache.name!r} has no map with a scope {scope!r}")
    return found
