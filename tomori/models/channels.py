"""Per-channel configuration: whitelist, cooldowns, LLM and system prompt overrides."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tomori.models.base import CacheFeedingModel
from tomori.models.servers import Llm, Persona, Server

MAX_COOLDOWN_SECONDS = 86_400


class CooldownType(models.TextChoices):
    NONE = "none", "no override"
    CHANNEL = "channel", "per channel"
    USER = "user", "per user"


class WhitelistedChannel(CacheFeedingModel):
    """A channel the bot may answer in, with persona restrictions and a cooldown."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="whitelisted_channels"
    )
    channel_disc_id = models.BigIntegerField()
    personas = models.ManyToManyField(
        Persona,
        blank=True,
        related_name="whitelisted_channels",
        help_text="When set, only these personas may answer in the channel.",
    )
    cooldown_type = models.CharField(
        max_length=10, choices=CooldownType.choices, default=CooldownType.NONE
    )
    cooldown_seconds = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "channel_whitelist"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "channel_disc_id"], name="whitelist_unique_channel"
            ),
            models.CheckConstraint(
                condition=Q(cooldown_seconds__gte=0)
                & Q(cooldown_seconds__lte=MAX_COOLDOWN_SECONDS),
                name="whitelist_cooldown_range",
            ),
            models.CheckConstraint(
                condition=Q(cooldown_type__in=["none", "channel", "user"]),
                name="whitelist_cooldown_type_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.channel_disc_id} in {self.server}"


class WhitelistedRole(CacheFeedingModel):
    """A role whose members may talk to the bot when the server restricts by role."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="whitelisted_roles"
    )
    role_disc_id = models.BigIntegerField()

    class Meta:
        db_table = "role_whitelist"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "role_disc_id"], name="role_whitelist_unique"
            )
        ]

    def __str__(self) -> str:
        return f"role {self.role_disc_id} in {self.server}"


class ChannelLlmOverride(CacheFeedingModel):
    """A channel that uses another LLM than the server's."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="+")
    channel_disc_id = models.BigIntegerField()
    llm = models.ForeignKey(Llm, on_delete=models.CASCADE, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "channel_llm_overrides"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "channel_disc_id"], name="channel_llm_unique"
            )
        ]

    def __str__(self) -> str:
        return f"#{self.channel_disc_id}: {self.llm}"


class PromptMode(models.TextChoices):
    APPEND = "append", "append to the persona prompt"
    REPLACE = "replace", "replace the persona prompt"


class ChannelPromptOverride(CacheFeedingModel):
    """A per-channel system prompt (the spec's channel_prompt_overrides table)."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="+")
    channel_disc_id = models.BigIntegerField()
    prompt = models.TextField()
    mode = models.CharField(
        max_length=10, choices=PromptMode.choices, default=PromptMode.APPEND
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "channel_prompt_overrides"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "channel_disc_id"], name="channel_prompt_unique"
            ),
            models.CheckConstraint(
                condition=Q(mode__in=["append", "replace"]), name="channel_prompt_mode"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.channel_disc_id} ({self.mode})"
