"""NovelAI subscription cache: a guild's tier and context limit, or None."""

from __future__ import annotations

from caches.core import MISSING
from caches.layers._support import (
    cached,
    minutes_setting,
    new_cache,
    parse_int,
    run_db,
)
from caches.registry import EmergencyPolicy, registry
from tomori.repositories import integrations as integrations_repo
from tomori.repositories.integrations import NovelAiSubscriptionRecord

NAME = "novelai_subscription"

_cache = new_cache(
    NAME,
    cap_setting="NOVELAI_SUBSCRIPTION_CACHE_MAX_ENTRIES",
    ttl=minutes_setting("NOVELAI_SUBSCRIPTION_CACHE_TTL_MINUTES"),
)


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


registry.register(
    NAME,
    _cache,
    policy=EmergencyPolicy.CLEAR,
    description="NovelAI tier and context limit per guild (None: no subscription).",
    key_help="server_id (the internal server id)",
    parse_key=parse_int,
    reload=lambda key: run_db(integrations_repo.get_novelai_subscription, key),
)
