"""Channel webhooks the bot manages; tokens are stored encrypted."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tomori.models.base import CacheFeedingModel
from tomori.models.servers import Server


class ManagedWebhook(CacheFeedingModel):
    """A channel's shared webhook; the token is ciphertext under `key_version`."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    channel_disc_id = models.BigIntegerField(unique=True)
    webhook_disc_id = models.BigIntegerField(unique=True)
    token_ciphertext = models.TextField()
    key_version = models.PositiveSmallIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "managed_webhooks"
        constraints = [
            models.CheckConstraint(
                condition=Q(key_version__gte=1), name="webhook_key_version_positive"
            )
        ]

    def __str__(self) -> str:
        return f"webhook {self.webhook_disc_id} in #{self.channel_disc_id}"
