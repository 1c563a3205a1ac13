"""NovelAI subscription cache: a guild's tier and context limit, or None."""

from __future__ import annotations

from typing import Any

from caches.core import MISSING, BoundedTTLCache
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
from tomori.repositories import integrations as integrations_repo
from tomori.repositories import population
from tomori.repositories.integrations import NovelAiSubscriptionRecord

NAME = "novelai_subscription"

CAP_SETTING = "NOVELAI_SUBSCRIPTION_CACHE_MAX_ENTRIES"
TTL_SETTING = "NOVELAI_SUBSCRIPTION_CACHE_TTL_MINUTES"

_cache: BoundedTTLCache[int, Any] = unbuilt(NAME)  # set by _build


def _build(config: LayerSettings) -> BoundedTTLCache[int, Any]:
    """Build the layer's map from its settings."""
    global _cache
    _cache = config.cache(NAME, cap=CAP_SETTING, ttl=config.minutes(TTL_SETTING))
    return _cache


async def get_cached_novelai_subscription(
    server_id: int,
) -> NovelAiSubscriptionRecord | None:
    """Return the guild's NovelAI tier and context limit (None: no subscription)."""
    subscription = cached(_cache, server_id)  # the hit path builds no closure
    if subscription is not MISSING:
        return subscription  # type: ignore[no-any-return]
    return await _cache.get_or_load(  # type: ignore[no-any-return]
        server_id, lambda: run_db(integrations_repo.get_novelai_subscription, server_id)
    )


def invalidate_novelai_subscription_cache(server_id: int) -> int:
    """Drop the guild's subscription; return entries removed."""
    return _cache.invalidate(server_id)


LAYER = Layer(
    name=NAME,
    guild=GuildScope("key", "server_id"),
    description="NovelAI tier and context limit per guild (None: no subscription).",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="server_id (the internal server id)",
        parse=parse_int,
        phrase=lambda s: f"NovelAI subscription of server #{s}",
    ),
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec(
        "NovelAI subscriptions", population.novelai_subscriptions
    ),
    reload=lambda key: run_db(integrations_repo.get_novelai_subscription, key),
)
