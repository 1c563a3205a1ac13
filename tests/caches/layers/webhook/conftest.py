"""Fixtures for the webhook layer tests: a fake clock, a fake webhook creator."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from caches.core import FakeClock
from caches.database import close_thread_connections
from caches.layers import short_term_memory
from caches.layers.webhook import CreatedWebhook, FailureReason, WebhookRefused
from caches.registry import registry
from tomori.domain.crypto import SecretToken


@pytest.fixture(autouse=True)
def close_async_connections() -> Iterator[None]:
    """Close the connections of the database threads after each test.

    Async tests query from those threads; their connections must be closed so the
    test database can be dropped at the end of the session. (The registry,
    so every layer here, is rebuilt before each test by the suite's fixture.)
    """
    yield
    close_thread_connections()


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    """Drive every layer from a fake clock; stored timestamps move with it."""
    fake = FakeClock(start=1000.0)
    registry.set_clock(fake)
    store = short_term_memory.short_term_memory_store()
    origin = timezone.now()
    store.wall_clock = lambda: origin + timedelta(seconds=fake.now - 1000.0)
    yield fake
    store.wall_clock = timezone.now


class FakeDiscordWebhooks:
    """Stands in for discord.py: creates webhooks, or refuses per channel."""

    def __init__(self) -> None:
        self.created: list[int] = []
        self.refuse: dict[int, FailureReason] = {}
        self.next_id = 900_000

    async def create_webhook(self, channel_disc_id: int) -> CreatedWebhook:
        if channel_disc_id in self.refuse:
            raise WebhookRefused(self.refuse[channel_disc_id])
        self.created.append(channel_disc_id)
        self.next_id += 1
        return CreatedWebhook(
            webhook_disc_id=self.next_id,
            token=SecretToken(f"tok-{self.next_id}-s3cr3t-{channel_disc_id}"),
        )


@pytest.fixture
def discord_webhooks() -> FakeDiscordWebhooks:
    """Return a fake webhook creator."""
    return FakeDiscordWebhooks()
