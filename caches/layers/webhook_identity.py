"""Webhook identity cache: webhook id -> the user its messages impersonate.

Proxy bots (PluralKit and the like) post a user's words through a webhook;
history builders ask this cache who is really speaking. The resolver that
finds out (a proxy API, a message lookup) is injected; a webhook that
impersonates nobody is cached as None, so it is asked once per ttl.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from caches.core import MISSING, BoundedTTLCache
from caches.layers._feeds import NotFed
from caches.layers._maps import OneMap
from caches.layers._message_keyed import parse_snowflake
from caches.layers._support import cached
from caches.layers.declaration import KeyShape, Layer
from caches.registry import EmergencyPolicy

NAME = "webhook_identity"


@dataclass(frozen=True, slots=True)
class WebhookIdentity:
    """The user a webhook speaks for."""

    user_disc_id: int
    display_name: str = ""


Resolver = Callable[[int], Awaitable[WebhookIdentity | None]]

CAP_SETTING = "WEBHOOK_IDENTITY_CACHE_MAX_ENTRIES"
TTL_SETTING = "WEBHOOK_IDENTITY_CACHE_TTL_MINUTES"

_layer: OneMap[int, WebhookIdentity | None] = OneMap(
    NAME, cap=CAP_SETTING, ttl=TTL_SETTING
)


def webhook_identity_cache() -> BoundedTTLCache[int, WebhookIdentity | None]:
    """Return this process's webhook identity cache (tests, metrics)."""
    return _layer.cache


def record_webhook_identity(
    webhook_disc_id: int, identity: WebhookIdentity | None
) -> None:
    """Remember who a webhook speaks for (None: nobody)."""
    _layer.cache.set(webhook_disc_id, identity)


def get_cached_webhook_identity(webhook_disc_id: int) -> WebhookIdentity | None:
    """Return the cached identity of a webhook, or None (unknown or nobody)."""
    value = _layer.cache.get(webhook_disc_id)
    return None if value is MISSING else value


async def resolve_webhook_identity(
    webhook_disc_id: int, resolve: Resolver
) -> WebhookIdentity | None:
    """Return who a webhook speaks for, asking `resolve` once on a miss."""
    identity = cached(_layer.cache, webhook_disc_id)  # the hit path builds no closure
    if identity is not MISSING:
        return identity  # type: ignore[no-any-return]
    return await _layer.cache.get_or_load(
        webhook_disc_id, lambda: resolve(webhook_disc_id)
    )


def invalidate_webhook_identity_cache(webhook_disc_id: int) -> int:
    """Forget one webhook's identity."""
    return _layer.cache.invalidate(webhook_disc_id)


LAYER = Layer(
    name=NAME,
    description="Webhook id -> the user a proxy webhook impersonates.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(help="a Discord webhook id", parse=parse_snowflake),
    not_fed=NotFed.DISCORD,
    build=_layer.build,
    settings=(CAP_SETTING, TTL_SETTING),
)
