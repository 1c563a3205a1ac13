"""Webhook identity cache: resolve once, negative entries, ttl, invalidation."""

from __future__ import annotations

import asyncio

from caches.core import FakeClock
from caches.layers.webhook_identity import (
    WebhookIdentity,
    get_cached_webhook_identity,
    invalidate_webhook_identity_cache,
    record_webhook_identity,
    resolve_webhook_identity,
)
from caches.registry import registry
from tomori.domain.knobs import knobs

ALICE = WebhookIdentity(user_disc_id=11, display_name="Alice")


class Resolver:
    def __init__(self, answers: dict[int, WebhookIdentity | None]) -> None:
        self.answers = answers
        self.calls: list[int] = []

    async def __call__(self, webhook_disc_id: int) -> WebhookIdentity | None:
        self.calls.append(webhook_disc_id)
        await asyncio.sleep(0)
        return self.answers.get(webhook_disc_id)


async def test_concurrent_lookups_resolve_once() -> None:
    resolver = Resolver({1: ALICE})
    found = await asyncio.gather(
        *(resolve_webhook_identity(1, resolver) for _ in range(4))
    )
    assert found == [ALICE] * 4
    assert resolver.calls == [1]


async def test_webhook_impersonating_nobody_is_cached_as_none() -> None:
    resolver = Resolver({})
    assert await resolve_webhook_identity(2, resolver) is None
    assert await resolve_webhook_identity(2, resolver) is None
    assert resolver.calls == [2]


async def test_identity_expires_after_its_ttl(clock: FakeClock) -> None:
    resolver = Resolver({3: ALICE})
    await resolve_webhook_identity(3, resolver)
    clock.advance(knobs().WEBHOOK_IDENTITY_CACHE_TTL_MINUTES * 60)
    await resolve_webhook_identity(3, resolver)
    assert resolver.calls == [3, 3]


def test_recorded_identity_is_served_and_invalidated() -> None:
    record_webhook_identity(4, ALICE)
    assert get_cached_webhook_identity(4) == ALICE
    assert invalidate_webhook_identity_cache(4) == 1
    assert get_cached_webhook_identity(4) is None
    record_webhook_identity(5, ALICE)
    assert registry.apply("webhook_identity", "key", 5) == 1
