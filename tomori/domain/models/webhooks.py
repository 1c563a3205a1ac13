"""Channel webhooks the bot manages; tokens are stored encrypted."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tomori.domain.models import validation as v
from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import (
    BoundedTextField,
    SnowflakeField,
    length_checks,
    snowflake_checks,
)
from tomori.domain.models.servers import Server


class ManagedWebhook(CacheFeedingModel):
    """A channel's shared webhook; the token is ciphertext under `key_version`."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    channel_disc_id = SnowflakeField(unique=True)
    webhook_disc_id = SnowflakeField(unique=True)
    token_ciphertext = BoundedTextField(max_length=v.TOKEN_CIPHERTEXT_MAX)
    key_version = models.PositiveSmallIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "managed_webhooks"
        constraints = [
            models.CheckConstraint(
                condition=Q(key_version__gte=1), name="webhook_key_version_positive"
            ),
            *snowflake_checks("webhook", "channel_disc_id", "webhook_disc_id"),
            *length_checks("webhook", token_ciphertext=v.TOKEN_CIPHERTEXT_MAX),
        ]

    def __str__(self) -> str:
        return f"webhook {self.webhook_disc_id} in #{self.channel_disc_id}"
