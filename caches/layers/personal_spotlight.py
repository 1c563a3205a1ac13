"""Personal spotlight cache (spec 17): a gate per server before the result per triple.

Two maps at different granularities, registered as one layer:
- gate: server_id -> has any spotlight (bounded by guild count);
- result: "server_id:user_id:channel_disc_id" -> SpotlightRecord | None,
  capped at PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES (expired first, then oldest).
A read consults the gate first; a server with no spotlights answers None and
creates no result entry. Invalidation drops the gate and the result entries
whose ids match exactly (channel 12 never matches channel 123). A whole
server's results (up to thousands of entries) go in steps on the event loop
(`caches.core.stepped`); meanwhile that server's reads go to the database.
"""

from __future__ import annotations

from collections.abc import Hashable
from time import time
from typing import Any

from caches.core import MISSING, BoundedTTLCache, SteppedDrop, Within
from caches.layers._feeds import Feed
from caches.layers._maps import LayerMaps
from caches.layers._support import (
    CompositeCache,
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
    Operation,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from tomori.domain.repositories import population
from tomori.domain.repositories import spotlight as spotlight_repo
from tomori.domain.repositories.spotlight import SpotlightRecord

NAME = "personal_spotlight"

CAP_SETTING = "PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES"
GATE_CAP_SETTING = "PERSONAL_SPOTLIGHT_GATE_MAX_ENTRIES"
TTL_SETTING = "PERSONAL_SPOTLIGHT_CACHE_TTL_MINUTES"
SpotlightKey = tuple[int, int, int]  # (server_id, user_id, channel_disc_id)


def _server_of(value: tuple[int, int]) -> int:
    return value[0]


def _user_scope(key: SpotlightKey) -> tuple[tuple[int, int]]:
    return ((key[0], key[1]),)


def _channel_scope(key: SpotlightKey) -> tuple[tuple[int, int]]:
    return ((key[0], key[2]),)


class SpotlightMaps(LayerMaps):
    """The result map (scoped), the per-server gate, and the stepped server drops."""

    __slots__ = ("results", "gate", "cache", "drops", "dropping")
    results: BoundedTTLCache[SpotlightKey, SpotlightRecord | None]
    gate: BoundedTTLCache[int, bool]
    cache: CompositeCache
    # A server's results are dropped in steps (see caches.core.stepped): up to
    # 1,000s of keys, 0.3 ms and more in one go. Its `pending` servers are
    # read through to the database until their old results are gone.
    drops: SteppedDrop
    dropping: set[Hashable]

    def make(self, config: LayerSettings) -> CompositeCache:
        """Make the result map, the gate and the drops from the settings."""
        ttl = config.minutes(TTL_SETTING)
        self.results = config.cache(
            NAME,
            cap=CAP_SETTING,
            ttl=ttl,
            # A server groups its (server, user) and (server, channel) values:
            # a server drop pops them and their keys, no scope function per key.
            scopes={
                "user": _user_scope,
                "channel": _channel_scope,
                "server": Within("user", "channel", parent=_server_of),
            },
        )
        self.drops = SteppedDrop(self.results, "server", via="user")
        self.dropping = self.drops.pending
        self.gate = config.cache(f"{NAME}:gate", cap=GATE_CAP_SETTING, ttl=ttl)
        self.cache = CompositeCache(self.results, gate=self.gate)
        return self.cache


_layer = SpotlightMaps(NAME)


def spotlight_cache_key(
    server_id: int, user_id: int, channel_disc_id: int
) -> SpotlightKey:
    """Return the result-map key of one (server, user, channel) triple."""
    return (server_id, user_id, channel_disc_id)


async def _server_has_spotlights(server_id: int) -> bool:
    """Load the server's gate (a miss: `cached` has not counted it)."""
    return await _layer.gate.get_or_load(  # type: ignore[no-any-return]
        server_id,
        lambda: run_db(spotlight_repo.server_has_personal_spotlights, server_id),
    )


async def _load_status(
    server_id: int, user_id: int, channel_disc_id: int
) -> SpotlightRecord | None:
    return await run_db(
        spotlight_repo.get_personal_spotlight_status,
        server_id=server_id,
        user_id=user_id,
        channel_disc_id=channel_disc_id,
    )


async def get_cached_personal_spotlight_status(
    server_id: int, user_id: int, channel_disc_id: int
) -> SpotlightRecord | None:
    """Return the user's active spotlight in the channel, or None."""
    layer = _layer  # one global read per hit
    # The server's gate, read inline: a hit awaits no nested coroutine.
    gate = cached(layer.gate, server_id)
    if gate is MISSING:
        gate = await _server_has_spotlights(server_id)
    if not gate:
        return None
    key = (server_id, user_id, channel_disc_id)  # spotlight_cache_key, inlined
    if layer.dropping and server_id in layer.dropping:
        # The server's old results are still being dropped: read through.
        record = await _load_status(server_id, user_id, channel_disc_id)
    else:
        record = cached(layer.results, key)
        if record is MISSING:
            record = await layer.results.get_or_load(
                key, lambda: _load_status(server_id, user_id, channel_disc_id)
            )
    # An open-ended spotlight (the usual one) needs no clock read.
    if record is None:
        return None
    expires = record.expires_ts
    if expires is None:
        return record
    if expires <= time():  # run out (POSIX seconds: no datetime per read)
        layer.results.invalidate(key)  # the next read lets the repository delete it
        return None
    return record


async def _warm(batch: GuildBatch) -> int:
    """Warm a batch of servers' gates (one query); return how many were stored."""
    return await warm_map(
        _layer.gate, batch.server_ids, spotlight_repo.servers_with_personal_spotlights
    )


def invalidate_personal_spotlight_cache(
    server_id: int, user_id: int | None = None, channel_disc_id: int | None = None
) -> int:
    """Drop the server's gate and the result entries matching exactly; return removals."""
    gate = _layer.gate.invalidate(server_id)
    if user_id is not None and channel_disc_id is not None:
        key = spotlight_cache_key(server_id, user_id, channel_disc_id)
        return gate + _layer.results.invalidate(key)
    if user_id is not None:
        return gate + _layer.results.invalidate_scope("user", (server_id, user_id))
    if channel_disc_id is not None:
        return gate + _layer.results.invalidate_scope(
            "channel", (server_id, channel_disc_id)
        )
    return gate + _layer.drops.drop(server_id)  # in steps on a running loop


def parse_spotlight_key(text: str) -> Hashable:
    """Parse "server_id" (the gate) or "server_id:user_id:channel_disc_id" (a result)."""
    parts = text.strip().split(":")
    if len(parts) == 1:
        return parse_int(parts[0])
    if len(parts) != 3:
        raise ValueError("expected server_id or server_id:user_id:channel_disc_id")
    return spotlight_cache_key(*(parse_int(p) for p in parts))


def _spotlight_phrase(server_id: int, user_id: Any = None, channel: Any = None) -> str:
    who = f"user #{user_id}" if user_id is not None else "every user"
    where = f"channel {channel}" if channel is not None else "every channel"
    return (
        f"personal spotlights of {who} in {where} of server #{server_id}, "
        "and the server's spotlight gate"
    )


LAYER = Layer(
    name=NAME,
    guild=GuildScope("spotlight", "server_id", scope="server"),
    description="Personal spotlight per server:user:channel, behind a per-server gate.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="server_id:user_id:channel_disc_id for a result, or server_id for "
        "the gate",
        parse=parse_spotlight_key,
    ),
    feeds=(
        Feed(
            "tomori.PersonalSpotlight",
            "spotlight",
            ("server_id", "user_id", "channel_disc_id"),
        ),
    ),
    build=_layer.build,
    settings=(CAP_SETTING, GATE_CAP_SETTING, TTL_SETTING),
    ops=(
        Operation(
            "spotlight",
            invalidate_personal_spotlight_cache,
            description="Drop a server's gate and its results matching exactly "
            "(user and channel None: every one).",
            phrase=_spotlight_phrase,
        ),
    ),
    mistaken_for=PopulationSpec("spotlight rows", population.spotlights),
    warm=_warm,
)
