"""Per-(server, channel) override caches, the shape the channel LLM and prompt layers share.

Keyed by (server_id, channel_disc_id); a channel with no override is cached as
None so unconfigured channels cost one lookup. Each entry holds only that
channel's own override: a thread without one inherits its parent's at read
time, so a parent's change reaches its threads with no entry of theirs to
drop. A database error answers "no override", is reported to
`caches.db_outage` (one rate-limited log) and caches nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from caches.core import MISSING
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._feeds import Feed
from caches.layers._maps import OneMap
from caches.layers._support import cached, parse_int_pair, run_db
from caches.layers.declaration import (
    GuildScope,
    KeyShape,
    Layer,
    Operation,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy

V = TypeVar("V")

#: The TTL both override layers are built with (the Tomori state's).
TTL_SETTING = "TOMORI_STATE_CACHE_TTL_MINUTES"


def override_key(phrase: Callable[[tuple[int, int]], str]) -> KeyShape:
    """Return the key shape of an override layer, with its save-message words."""
    return KeyShape(
        help="server_id:channel_disc_id (internal server id, Discord channel id)",
        parse=parse_int_pair,
        phrase=phrase,
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


class OverrideLayer(OneMap[tuple[int, int], V | None]):
    """One per-channel override layer (None: the channel has none): map, reads, drops, declaration."""

    __slots__ = ("_load_row", "layer")

    def __init__(
        self,
        name: str,
        *,
        cap_setting: str,
        load: Callable[[int, int], V | None],
        words: OverrideWords,
        feeds: tuple[Feed, ...],
    ) -> None:
        """`load(server_id, channel_disc_id)` reads one channel's own override."""
        super().__init__(
            name, cap=cap_setting, ttl=TTL_SETTING, scopes={"server": _server_scope}
        )
        self._load_row = load

        def channel_phrase(server_id: int, channel_disc_id: int | None = None) -> str:
            if channel_disc_id is None:
                return words.server(server_id)
            return words.channel(server_id, channel_disc_id)

        self.layer = Layer(
            name=name,
            guild=GuildScope("server", "server_id", scope="server"),
            description=words.description,
            policy=EmergencyPolicy.CLEAR,
            key=override_key(words.key),
            feeds=feeds,
            build=self.build,
            settings=(cap_setting, TTL_SETTING),
            ops=(
                Operation(
                    "server",
                    self.invalidate_server,
                    description="Drop every override entry of one server.",
                    phrase=words.server,
                ),
                Operation(
                    "channel",
                    self.invalidate,
                    description=words.channel_note,
                    phrase=channel_phrase,
                ),
            ),
            mistaken_for=words.population,
        )

    async def get(
        self, server_id: int, channel_disc_id: int, *, parent_disc_id: int | None = None
    ) -> V | None:
        """Return the channel's override, else its parent's (a thread); None on a database error."""
        try:
            # The channel's own entry is read inline: a hit awaits nothing.
            value = cached(self.cache, (server_id, channel_disc_id))
            if value is MISSING:
                value = await self._load(server_id, channel_disc_id)
            if value is None and parent_disc_id is not None:
                value = await self.own(server_id, parent_disc_id)
        except DB_ERRORS as exc:
            database_failed(self.name, exc)
            return None
        return value  # type: ignore[no-any-return]

    async def own(self, server_id: int, channel_disc_id: int) -> V | None:
        """Return the channel's own override, loading it on a miss (errors propagate)."""
        value = cached(self.cache, (server_id, channel_disc_id))
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        return await self._load(server_id, channel_disc_id)

    def _load(self, server_id: int, channel_disc_id: int) -> Awaitable[V | None]:
        """Load a missed entry (single flight); only a miss builds this closure."""
        return self.cache.get_or_load(
            (server_id, channel_disc_id),
            lambda: run_db(self._load_row, server_id, channel_disc_id),
        )

    def invalidate(self, server_id: int, channel_disc_id: int | None = None) -> int:
        """Drop one channel's entry, or every entry of the server; return removals."""
        if channel_disc_id is None:
            return self.cache.invalidate_scope("server", server_id)
        return self.cache.invalidate((server_id, channel_disc_id))

    def invalidate_server(self, server_id: int) -> int:
        """Drop every entry of the server; return removals."""
        return self.invalidate(server_id)
