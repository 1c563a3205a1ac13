"""Per-(server, channel) override caches behind a per-server gate (channel LLM and prompt).

Two maps, registered as one layer (`GatedCache`):
- gate: server_id -> the channels of the server that have an override (a
  frozenset; one query per server, single flight; CHANNEL_GATE_MAX_ENTRIES);
- values: (server_id, channel_disc_id) -> that channel's own override, loaded
  only for a channel its server's gate lists.
A channel the gate does not list answers None and creates no entry: of the
production scenario's 11,200 channels 46 have an override, and before the
gate every other channel a message came from cost a query per TTL. A thread
without an override of its own inherits its parent's at read time, so a
parent's change reaches its threads with no entry of theirs to drop.

Every invalidation of a channel or of a server drops the server's gate with
the entries (a write adding or removing an override changes the gate); a gate
load that an invalidation overlaps is not stored (the core's `get_or_load`).
A database error answers "no override", is reported to `caches.db_outage` and
caches nothing.

Counting: each read counts once on the layer's own counters (the values
map's, which the registry reports): a hit when the gate or an entry answered,
a miss when it had to load. The gate counts its own lookups besides.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from caches.core import MISSING, BoundedTTLCache
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._feeds import Feed
from caches.layers._maps import LayerMaps
from caches.layers._support import (
    GatedCache,
    cached,
    parse_gate_or,
    parse_int_pair,
    run_db,
)
from caches.layers.declaration import (
    GuildBatch,
    GuildScope,
    KeyShape,
    Layer,
    LayerSettings,
    Operation,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from caches.turn_notes import note_miss

V = TypeVar("V")

#: The TTL both override layers are built with (the Tomori state's).
TTL_SETTING = "TOMORI_STATE_CACHE_TTL_MINUTES"
#: The cap of each per-server map (gates, whitelist rows): one entry per server.
GATE_CAP_SETTING = "CHANNEL_GATE_MAX_ENTRIES"

#: server_ids -> {server_id: the channels with an override} (every id answered).
LoadGates = Callable[[Collection[int]], dict[int, frozenset[int]]]


def override_key(phrase: Callable[[tuple[int, int]], str]) -> KeyShape:
    """Return the key shape of an override layer, with its save-message words."""

    def words(key: Hashable) -> str:
        if isinstance(key, int):
            return f"channels with an override in server #{key} (the gate)"
        return phrase(key)  # type: ignore[arg-type]

    return KeyShape(
        help="server_id:channel_disc_id (internal server id, Discord channel id), "
        "or server_id for the server's gate",
        parse=parse_gate_or(parse_int_pair),
        phrase=words,
    )


def _server_scope(key: tuple[int, int]) -> tuple[int]:
    return (key[0],)


@dataclass(frozen=True, slots=True)
class OverrideWords:
    """What one override layer's declaration says (the rest is the same for both)."""

    description: str
    key: Callable[[tuple[int, int]], str]  # a key's save-message words
    server: Callable[[int], str]  # the "server" operation's words
    channel: Callable[[int, int], str]  # the "channel" operation's words
    channel_note: str  # the "channel" operation's description
    population: PopulationSpec


class OverrideLayer(LayerMaps, Generic[V]):
    """One per-channel override layer (None: the channel has none): maps, reads, drops."""

    __slots__ = (
        "cap_setting",
        "_load_row",
        "_load_gates",
        "values",
        "gate",
        "cache",
        "layer",
    )
    values: BoundedTTLCache[tuple[int, int], V | None]
    gate: BoundedTTLCache[int, frozenset[int]]
    cache: GatedCache

    def __init__(
        self,
        name: str,
        *,
        cap_setting: str,
        load: Callable[[int, int], V | None],
        load_gates: LoadGates,
        words: OverrideWords,
        feeds: tuple[Feed, ...],
    ) -> None:
        """`load(server_id, channel_disc_id)` reads one channel's own override."""
        super().__init__(name)
        self.cap_setting = cap_setting
        self._load_row = load
        self._load_gates = load_gates
        self.layer = _declare(self, words, feeds)

    def make(self, config: LayerSettings) -> GatedCache:
        """Make the values map and the gate from the settings."""
        ttl = config.minutes(TTL_SETTING)
        self.values = config.cache(
            self.name, cap=self.cap_setting, ttl=ttl, scopes={"server": _server_scope}
        )
        self.gate = config.cache(f"{self.name}:gate", cap=GATE_CAP_SETTING, ttl=ttl)
        self.cache = GatedCache(self.values, self.gate)
        return self.cache

    async def get(
        self, server_id: int, channel_disc_id: int, *, parent_disc_id: int | None = None
    ) -> V | None:
        """Return the channel's override, else its parent's (a thread); None on a database error."""
        gate = self.gate.get(server_id)  # read inline: a hit awaits nothing
        if gate is not MISSING:
            if channel_disc_id in gate:
                value = self.values.get((server_id, channel_disc_id))
                if value is not MISSING and value is not None:
                    return value  # type: ignore[no-any-return]
                if value is MISSING:
                    self.values.misses -= 1  # the load below counts it
            elif parent_disc_id not in gate:
                self.values.hits += 1  # the gate answered: a hit of the layer
                return None
        return await self._resolve(server_id, channel_disc_id, parent_disc_id, gate)

    async def _resolve(
        self,
        server_id: int,
        channel_disc_id: int,
        parent_disc_id: int | None,
        gate: frozenset[int] | Any,
    ) -> V | None:
        """The rest of `get`: load the gate or an entry, or read a thread's parent."""
        try:
            if gate is MISSING:
                gate = await self._load_gate(server_id)
                if channel_disc_id not in gate and parent_disc_id not in gate:
                    self.values.misses += 1  # the layer's read loaded the gate
                    return None
            value = None
            if channel_disc_id in gate:
                value = await self.own(server_id, channel_disc_id)
            if value is None and parent_disc_id is not None and parent_disc_id in gate:
                value = await self.own(server_id, parent_disc_id)
        except DB_ERRORS as exc:
            database_failed(self.name, exc)
            return None
        return value

    async def own(self, server_id: int, channel_disc_id: int) -> V | None:
        """Return the channel's own override, loading it on a miss (errors propagate)."""
        value = cached(self.values, (server_id, channel_disc_id))
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        return await self._load(server_id, channel_disc_id)

    def _load(self, server_id: int, channel_disc_id: int) -> Awaitable[V | None]:
        """Load a missed entry (single flight); only a miss builds this closure."""
        return self.values.get_or_load(
            (server_id, channel_disc_id),
            lambda: run_db(self._load_row, server_id, channel_disc_id),
        )

    async def _load_gate(self, server_id: int) -> frozenset[int]:
        """Load the server's gate (single flight) after `get` counted its miss."""
        self.gate.misses -= 1  # get_or_load counts it
        note_miss(self.name)
        return await self.gate.get_or_load(  # type: ignore[no-any-return]
            server_id, lambda: run_db(self.gate_of, server_id)
        )

    def gate_of(self, server_id: int) -> frozenset[int]:
        """Read the server's gate from the database (the gate loader; sync)."""
        return self._load_gates([server_id])[server_id]

    async def reload(self, key: Any) -> Any:
        """Read a key afresh as the layer would cache it (the consistency watcher)."""
        if isinstance(key, int):
            return await run_db(self.gate_of, key)
        return await run_db(self._load_row, *key)

    async def warm(self, batch: GuildBatch) -> int:
        """Load the gates of a batch of servers in one query; return how many were stored."""
        return await self.gate.load_many(
            batch.server_ids, lambda ids: run_db(self._load_gates, ids)
        )

    def invalidate(self, server_id: int, channel_disc_id: int | None = None) -> int:
        """Drop the server's gate and one channel's entry (or all the server's); return removals."""
        dropped = self.gate.invalidate(server_id)
        if channel_disc_id is None:
            return dropped + self.values.invalidate_scope("server", server_id)
        return dropped + self.values.invalidate((server_id, channel_disc_id))

    def invalidate_server(self, server_id: int) -> int:
        """Drop the server's gate and every entry of the server; return removals."""
        return self.invalidate(server_id)


def _declare(
    maps: OverrideLayer[Any], words: OverrideWords, feeds: tuple[Feed, ...]
) -> Layer:
    """Return the declaration of an override layer."""

    def channel_phrase(server_id: int, channel_disc_id: int | None = None) -> str:
        if channel_disc_id is None:
            return words.server(server_id)
        return words.channel(server_id, channel_disc_id)

    return Layer(
        name=maps.name,
        guild=GuildScope("server", "server_id", scope="server"),
        description=words.description,
        policy=EmergencyPolicy.CLEAR,
        key=override_key(words.key),
        feeds=feeds,
        build=maps.build,
        settings=(maps.cap_setting, GATE_CAP_SETTING, TTL_SETTING),
        ops=(
            Operation(
                "server",
                maps.invalidate_server,
                description="Drop the server's gate and every override entry of it.",
                phrase=words.server,
            ),
            Operation(
                "channel",
                maps.invalidate,
                description=words.channel_note,
                phrase=channel_phrase,
            ),
        ),
        mistaken_for=words.population,
        reload=maps.reload,
        warm=maps.warm,
    )
