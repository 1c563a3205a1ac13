"""Layers holding one value per server, read through: their key shapes and maps.

`SERVER_ID` and `SERVER_DISC_ID` are the two ways a layer keys a server (the
internal id or the Discord guild id): each gives the layer's key shape and the
scope that drops a guild's entry when the bot leaves it. `ServerValueLayer`
is a whole layer of that kind (the ST preset and NovelAI subscription layers
differ only in their row); `StaleFallbackMaps` is the maps of one whose last
good value answers a failed reload (Tomori state, guild MCP config).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from caches.core import MISSING, BoundedTTLCache, Loader
from caches.db_outage import DB_ERRORS, database_failed, served_stale
from caches.layers._feeds import Feed
from caches.layers._maps import LayerMaps, OneMap
from caches.layers._support import (
    StaleFallbackCache,
    cached,
    parse_int,
    run_db,
    warm_map,
)
from caches.layers.declaration import (
    GuildBatch,
    GuildScope,
    KeyShape,
    Layer,
    LayerSettings,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from tomori.domain.knobs import Knob

K = TypeVar("K")
R = TypeVar("R")


@dataclass(frozen=True)
class ServerKey:
    """A layer keyed by one server id: its key shape and its guild scope."""

    by: Literal["server_id", "server_disc_id"]
    help: str

    @property
    def guild(self) -> GuildScope:
        """Return the scope dropping a guild's entry: its key."""
        return GuildScope("key", self.by)

    def key(self, phrase: Callable[[int], str]) -> KeyShape:
        """Return the key shape, with a key's save-message words."""
        return KeyShape(help=self.help, parse=parse_int, phrase=phrase)


SERVER_ID = ServerKey("server_id", "server_id (the internal server id)")
SERVER_DISC_ID = ServerKey(
    "server_disc_id", "server_disc_id (the Discord guild id), e.g. 123456789012345678"
)


class ServerValueLayer(OneMap[int, R]):
    """One value per server: `get` reads through, `invalidate` drops, `layer` declares."""

    __slots__ = ("_load", "_load_of", "layer")

    def __init__(
        self,
        name: str,
        *,
        cap_setting: str,
        ttl_setting: str,
        load: Callable[[int], R],
        load_of: Callable[[list[int]], dict[int, R]],
        description: str,
        phrase: Callable[[int], str],
        feeds: tuple[Feed, ...],
        population: PopulationSpec | None = None,
        knobs: tuple[Knob, ...] = (),
    ) -> None:
        super().__init__(name, cap=cap_setting, ttl=ttl_setting)
        self._load = load
        self._load_of = load_of
        self.layer = Layer(
            name=name,
            guild=SERVER_ID.guild,
            description=description,
            policy=EmergencyPolicy.CLEAR,
            key=SERVER_ID.key(phrase),
            feeds=feeds,
            build=self.build,
            settings=(cap_setting, ttl_setting),
            knobs=knobs,
            mistaken_for=population,
            reload=lambda key: run_db(load, key),
            warm=self.warm,
        )

    async def get(self, server_id: int) -> R:
        """Return the server's value, loading it on a miss."""
        value = cached(self.cache, server_id)  # the hit path builds no closure
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        return await self.cache.get_or_load(
            server_id, lambda: run_db(self._load, server_id)
        )

    async def warm(self, batch: GuildBatch) -> int:
        """Warm a batch of servers' values (`load_of`); return how many were stored."""
        return await warm_map(self.cache, batch.server_ids, self._load_of)

    def invalidate(self, server_id: int) -> int:
        """Drop the server's value; return entries removed."""
        return self.cache.invalidate(server_id)


class StaleFallbackMaps(LayerMaps, Generic[K, R]):
    """A fresh map read through, and each key's last good value for a failed reload.

    `fresh` holds values for the TTL setting's minutes, `cache` (the one the
    registry holds) adds the last good values, kept `retention` seconds.
    """

    __slots__ = ("cap_setting", "ttl_setting", "retention", "fresh", "cache")
    fresh: BoundedTTLCache[K, R]
    cache: StaleFallbackCache

    def __init__(self, name: str, *, cap: str, ttl: str, retention: float) -> None:
        super().__init__(name)
        self.cap_setting, self.ttl_setting = cap, ttl
        self.retention = retention

    def make(self, config: LayerSettings) -> StaleFallbackCache:
        """Make the fresh and last-good maps (and `members`) from the settings."""
        self.fresh = config.cache(
            self.name, cap=self.cap_setting, ttl=config.minutes(self.ttl_setting)
        )
        self.cache = StaleFallbackCache(
            self.fresh, retention=self.retention, **self.members(config)
        )
        return self.cache

    def members(self, config: LayerSettings) -> dict[str, BoundedTTLCache[Any, Any]]:
        """Make the layer's further maps (none here)."""
        return {}

    async def load_or_stale(self, key: K, load: Loader[Any]) -> tuple[Any, bool]:
        """Load `key` (one flight): (value, False); on a database error (stale, True).

        `stale` is the key's last good value (counted as served stale) or
        MISSING; the error is reported to `caches.db_outage` and to `failed`.
        """
        try:
            return await self.cache.get_or_load(key, load), False
        except DB_ERRORS as exc:
            database_failed(self.name, exc)
            self.failed(key, exc)
            stale = self.cache.fallback(key)
            if stale is not MISSING:
                served_stale(self.name)
            return stale, True

    def failed(self, key: K, exc: BaseException) -> None:
        """Note a failed load of `key` (nothing here)."""
