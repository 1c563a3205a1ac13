"""Short-term memory (spec 5): per-channel conversation snippets and summaries.

Keys: `shortterm:user:{user}:{channel}[:{persona}]` (always written) and
`shortterm:server:{server}:{channel}[:{persona}]` (guilds only; shared by the
channel's users and visible from the server's other channels). Raw messages
live only here; summaries, categories and turn counters are also written to
the ShortTermMemoryRecord table after the cache (never blocking a reply) and
come back from it on a miss, so they survive a restart. It is conversational
state, not a read-through cache: not invalidatable by the bus, and the
emergency clear only sweeps expired entries.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Unpack

from caches.layers._feeds import NotFed
from caches.layers._maps import LayerMaps
from caches.layers.declaration import (
    KeyShape,
    Layer,
    LayerSettings,
    PopulationSpec,
)
from caches.layers.short_term_memory import keys as _k
from caches.layers.short_term_memory.entry import ShortTermMemoryEntry, StmMessage
from caches.layers.short_term_memory.keys import (
    parse_registry_key,
    server_short_term_memory_key,
    user_short_term_memory_key,
)
from caches.layers.short_term_memory.store import (
    CHANNEL,
    OWNER,
    ScopeFilters,
    ShortTermMemoryStore,
    TurnMemory,
    owner_scope_value,
)
from caches.registry import EmergencyPolicy
from tomori.domain.knobs import knobs
from tomori.domain.repositories import population
from tomori.domain.repositories.memory import DeleteWhere

NAME = "short_term_memory"

CAP_SETTING = "SHORT_TERM_MEMORY_CACHE_MAX_ENTRIES"
#: Read by the store itself (entry lifetimes); a change rebuilds the layer.
TTL_SETTINGS = ("SHORT_TERM_MEMORY_TTL_HOURS", "SHORT_TERM_MEMORY_SUMMARY_TTL_HOURS")


class ShortTermMemoryLayer(LayerMaps):
    """The layer's one store, built from its cap setting."""

    __slots__ = ("store",)
    store: ShortTermMemoryStore

    def make(self, config: LayerSettings) -> ShortTermMemoryStore:
        """Make the store (it reads the TTL settings itself, per entry)."""
        self.store = ShortTermMemoryStore(maxsize=config.cap(CAP_SETTING))
        return self.store


_layer = ShortTermMemoryLayer(NAME)


def short_term_memory_store() -> ShortTermMemoryStore:
    """Return this process's store (tests, metrics)."""
    return _layer.store


async def store_short_term_memory(**fields: Any) -> ShortTermMemoryEntry:
    """Store a turn's messages (see `ShortTermMemoryStore.store`)."""
    return await _layer.store.store(**fields)


async def update_short_term_memory_summary(
    **fields: Any,
) -> list[ShortTermMemoryEntry]:
    """Set a channel's summary (see `ShortTermMemoryStore.update_summary`)."""
    return await _layer.store.update_summary(**fields)


async def get_short_term_memory_for_user_channel(
    user_disc_id: int, channel_disc_id: int, *, persona_id: int | None = None
) -> ShortTermMemoryEntry | None:
    """Return a user's entry for a channel, or None."""
    key = user_short_term_memory_key(user_disc_id, channel_disc_id, persona_id)
    return await _layer.store.get(key)


async def get_short_term_memory_for_server_channel(
    server_disc_id: int, channel_disc_id: int, *, persona_id: int | None = None
) -> ShortTermMemoryEntry | None:
    """Return a channel's server-shared entry, or None."""
    key = server_short_term_memory_key(server_disc_id, channel_disc_id, persona_id)
    return await _layer.store.get(key)


async def get_short_term_memories_for_user(
    user_disc_id: int, **filters: Unpack[ScopeFilters]
) -> list[ShortTermMemoryEntry]:
    """Return a user's entries across channels and servers, newest first."""
    return await _layer.store.list_scope(_k.USER, user_disc_id, **filters)


async def get_short_term_memories_for_server(
    server_disc_id: int, **filters: Unpack[ScopeFilters]
) -> list[ShortTermMemoryEntry]:
    """Return a server's shared entries (every channel and persona), newest first."""
    return await _layer.store.list_scope(_k.SERVER, server_disc_id, **filters)


async def get_short_term_memories_from_other_channels(
    server_disc_id: int,
    channel_disc_id: int,
    *,
    persona_lineage: Collection[int] | None = None,
) -> list[ShortTermMemoryEntry]:
    """Return the latest shared entry of up to MAX_OTHER_CHANNELS other channels."""
    limit = knobs().SHORT_TERM_MEMORY_MAX_OTHER_CHANNELS
    if limit == 0:
        return []
    entries = await get_short_term_memories_for_server(
        server_disc_id,
        exclude_channel_disc_id=channel_disc_id,
        persona_lineage=persona_lineage,
    )
    latest: dict[int, ShortTermMemoryEntry] = {}
    for entry in entries:  # newest first: the first per channel is its latest
        latest.setdefault(entry.channel_disc_id, entry)
        if len(latest) == limit:
            break
    return list(latest.values())


def clear_short_term_memory_for_user(user_disc_id: int) -> int:
    """Forget every user-scoped entry of a user (cache and table)."""
    prefix = f"{_k.PREFIX}{_k.USER}:{user_disc_id}:"
    return _layer.store.delete_scope(
        OWNER,
        owner_scope_value(_k.USER, user_disc_id),
        DeleteWhere(scope=_k.USER, user_disc_id=user_disc_id),
        lambda key: key.startswith(prefix),
    )


def clear_short_term_memory_for_channel(channel_disc_id: int) -> int:
    """Forget every entry of a channel, in every scope and persona."""
    channel = str(channel_disc_id)
    return _layer.store.delete_scope(
        CHANNEL,
        channel,
        DeleteWhere(channel_disc_id=channel_disc_id),
        lambda key: key.split(":")[3] == channel,
    )


def clear_short_term_memory_for_server_channel(
    server_disc_id: int,
    channel_disc_id: int,
    *,
    persona_id: int | None = None,
    all_personas: bool = False,
) -> int:
    """Forget a channel's server-shared entry; user-scoped entries stay.

    Clears the one key of `persona_id` (None: the persona-less key), or with
    `all_personas` every persona's shared entry of the channel.
    """
    if not all_personas:
        key = server_short_term_memory_key(server_disc_id, channel_disc_id, persona_id)
        return _layer.store.delete_key(key)
    base = server_short_term_memory_key(server_disc_id, channel_disc_id)

    def shared(key: str) -> bool:
        return key == base or key.startswith(base + ":")

    # The channel's index holds every scope's keys: keep the shared ones.
    return _layer.store.delete_keys(
        [key for key in _layer.store.channel_keys(channel_disc_id) if shared(key)],
        DeleteWhere(
            scope=_k.SERVER,
            server_disc_id=server_disc_id,
            channel_disc_id=channel_disc_id,
        ),
        shared,
    )


def clear_expired_entries() -> int:
    """Drop every expired entry now; return how many (the emergency sweeper)."""
    return _layer.store.clear_expired()


async def flush_pending_writes() -> None:
    """Wait until every queued durable write is in the table."""
    await _layer.store.flush()


LAYER = Layer(
    name=NAME,
    description=(
        "Short-term memory: per-channel conversation snippets and summaries "
        "(state; summaries persist in the short_term_memory table)."
    ),
    policy=EmergencyPolicy.EXPIRED_ONLY,
    invalidatable=False,
    key=KeyShape(
        help="shortterm:user:<user>:<channel>[:<persona>] or "
        "shortterm:server:<server>:<channel>[:<persona>]",
        parse=parse_registry_key,
    ),
    not_fed=NotFed.TURN_WRITTEN,
    build=_layer.build,
    settings=(CAP_SETTING, *TTL_SETTINGS),
    mistaken_for=PopulationSpec(
        "stored short-term memories", population.stored_short_term_memories
    ),
)

__all__ = [
    "LAYER",
    "ShortTermMemoryEntry",
    "ShortTermMemoryStore",
    "StmMessage",
    "TurnMemory",
    "clear_expired_entries",
    "clear_short_term_memory_for_channel",
    "clear_short_term_memory_for_server_channel",
    "clear_short_term_memory_for_user",
    "flush_pending_writes",
    "get_short_term_memories_for_server",
    "get_short_term_memories_for_user",
    "get_short_term_memories_from_other_channels",
    "get_short_term_memory_for_server_channel",
    "get_short_term_memory_for_user_channel",
    "server_short_term_memory_key",
    "short_term_memory_store",
    "store_short_term_memory",
    "update_short_term_memory_summary",
    "user_short_term_memory_key",
]
