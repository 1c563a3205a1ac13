"""Layers holding one value per server (keyed by the internal server id), read through.

The ST preset and NovelAI subscription layers are the same layer with a
different row: a server's value (None: it has none) loaded on a miss, with
a cap and a ttl setting, dropped per server. `ServerValueLayer` is that
layer once; each module declares its name, settings, loader and words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from caches.core import MISSING, BoundedTTLCache
from caches.layers._feeds import Feed
from caches.layers._support import cached, parse_int, run_db
from caches.layers.declaration import (
    GuildScope,
    KeyShape,
    Layer,
    LayerSettings,
    PopulationSpec,
    unbuilt,
)
from caches.registry import EmergencyPolicy

R = TypeVar("R")


class ServerValueLayer(Generic[R]):
    """One value per server: `get` reads through, `invalidate` drops, `layer` declares."""

    def __init__(
        self,
        name: str,
        *,
        cap_setting: str,
        ttl_setting: str,
        load: Callable[[int], R],
        description: str,
        phrase: Callable[[int], str],
        population: PopulationSpec,
        feeds: tuple[Feed, ...],
    ) -> None:
        self.name = name
        self.cap_setting = cap_setting
        self.ttl_setting = ttl_setting
        self.cache: BoundedTTLCache[int, R] = unbuilt(name)  # set by _build
        self._load = load
        self.layer = Layer(
            name=name,
            guild=GuildScope("key", "server_id"),
            description=description,
            policy=EmergencyPolicy.CLEAR,
            key=KeyShape(
                help="server_id (the internal server id)",
                parse=parse_int,
                phrase=phrase,
            ),
            feeds=feeds,
            build=self._build,
            settings=(cap_setting, ttl_setting),
            mistaken_for=population,
            reload=lambda key: run_db(load, key),
        )

    def _build(self, config: LayerSettings) -> BoundedTTLCache[int, R]:
        """Build the layer's map from its settings."""
        self.cache = config.cache(
            self.name, cap=self.cap_setting, ttl=config.minutes(self.ttl_setting)
        )
        return self.cache

    async def get(self, server_id: int) -> R:
        """Return the server's value, loading it on a miss."""
        value = cached(self.cache, server_id)  # the hit path builds no closure
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        return await self.cache.get_or_load(
            server_id, lambda: run_db(self._load, server_id)
        )

    def invalidate(self, server_id: int) -> int:
        """Drop the server's value; return entries removed."""
        return self.cache.invalidate(server_id)
