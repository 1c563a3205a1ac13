"""NovelAI subscription cache: a guild's tier and context limit, or None."""

from __future__ import annotations

from caches.layers._feeds import Feed
from caches.layers._server_value import ServerValueLayer
from caches.layers.declaration import PopulationSpec
from tomori.domain.repositories import integrations as integrations_repo
from tomori.domain.repositories import population
from tomori.domain.repositories.integrations import NovelAiSubscriptionRecord

NAME = "novelai_subscription"

_layer: ServerValueLayer[NovelAiSubscriptionRecord | None] = ServerValueLayer(
    NAME,
    cap_setting="NOVELAI_SUBSCRIPTION_CACHE_MAX_ENTRIES",
    ttl_setting="NOVELAI_SUBSCRIPTION_CACHE_TTL_MINUTES",
    load=lambda server_id: integrations_repo.get_novelai_subscription(server_id),
    load_of=lambda server_ids: integrations_repo.get_novelai_subscriptions(server_ids),
    description="NovelAI tier and context limit per guild (None: no subscription).",
    phrase=lambda s: f"NovelAI subscription of server #{s}",
    population=PopulationSpec(
        "NovelAI subscriptions", population.novelai_subscriptions
    ),
    feeds=(
        Feed(
            "tomori.NovelAiSubscription",
            "key",
            ("server_id",),
            fields=("tier", "context_limit"),
        ),
    ),
)

#: Return the guild's NovelAI tier and context limit (None: no subscription).
get_cached_novelai_subscription = _layer.get
#: Drop the guild's subscription; return entries removed.
invalidate_novelai_subscription_cache = _layer.invalidate

LAYER = _layer.layer
