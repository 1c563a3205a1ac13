"""Fixtures for the webhook layer tests: a fake clock, a fake webhook creator."""

from __future__ import annotations

import pytest

from caches.layers.webhook import CreatedWebhook, FailureReason, WebhookRefused
from tests.caches.layers.stm_clock import clock, close_async_connections  # noqa: F401
from tomori.domain.crypto import SecretToken


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
