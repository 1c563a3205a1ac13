"""Per-channel configuration: whitelist, cooldowns, LLM and system prompt overrides."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.db.models.signals import m2m_changed

from tomori.domain.models import validation as v
from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import (
    BoundedTextField,
    SnowflakeField,
    length_checks,
    snowflake_checks,
)
from tomori.domain.models.servers import Llm, Persona, Server

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
    channel_disc_id = SnowflakeField()
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
            *snowflake_checks("whitelist", "channel_disc_id"),
        ]

    def __str__(self) -> str:
        return f"#{self.channel_disc_id} in {self.server}"


def check_channel_personas(server_id: int, personas: Iterable[Persona]) -> None:
    """Raise ValidationError if any of `personas` belongs to another server."""
    foreign = [p for p in personas if p.server_id != server_id]
    if foreign:
        raise foreign_personas_error(foreign)


def foreign_personas_error(personas: Iterable[Any]) -> ValidationError:
    """Return the error naming personas that belong to another server than the channel."""
    names = ", ".join(sorted(f"{p.name} ({p.server})" for p in personas)[:5])
    return ValidationError(
        "A channel may only be restricted to personas of its own server "
        "(not %(names)s).",
        code="foreign_persona",
        params={"names": names},
    )


def _reject_foreign_personas(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kw: Any
) -> None:
    # Writes that skip the admin form (shell, repositories, the reverse
    # relation) cannot link a channel to another server's persona either.
    if action != "pre_add" or not pk_set:
        return
    using = kw.get("using")
    if reverse:  # persona.whitelisted_channels.add(channel, ...)
        rows = WhitelistedChannel._base_manager.using(using).filter(pk__in=pk_set)
        if rows.exclude(server_id=instance.server_id).exists():
            raise foreign_personas_error([instance])
        return
    personas = Persona._base_manager.using(using).filter(pk__in=pk_set)
    foreign = list(
        personas.exclude(server_id=instance.server_id).select_related("server")
    )
    if foreign:
        raise foreign_personas_error(foreign)


def connect_persona_guard() -> None:
    """Reject whitelist rows that link a channel to another server's persona."""
    m2m_changed.connect(
        _reject_foreign_personas,
        sender=WhitelistedChannel.personas.through,
        dispatch_uid="tomori.whitelist.reject_foreign_personas",
    )


class WhitelistedRole(CacheFeedingModel):
    """A role whose members may talk to the bot when the server restricts by role."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="whitelisted_roles"
    )
    role_disc_id = SnowflakeField()

    class Meta:
        db_table = "role_whitelist"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "role_disc_id"], name="role_whitelist_unique"
            ),
            *snowflake_checks("role_whitelist", "role_disc_id"),
        ]

    def __str__(self) -> str:
        return f"role {self.role_disc_id} in {self.server}"


class ChannelLlmOverride(CacheFeedingModel):
    """A channel that uses another LLM than the server's."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="+")
    channel_disc_id = SnowflakeField()
    llm = models.ForeignKey(Llm, on_delete=models.CASCADE, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "channel_llm_overrides"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "channel_disc_id"], name="channel_llm_unique"
            ),
            *snowflake_checks("channel_llm", "channel_disc_id"),
        ]

    def __str__(self) -> str:
        return f"#{self.channel_disc_id}: {self.llm}"


class PromptMode(models.TextChoices):
    APPEND = "append", "append to the persona prompt"
    REPLACE = "replace", "replace the persona prompt"


class ChannelPromptOverride(CacheFeedingModel):
    """A per-channel system prompt (the spec's channel_prompt_overrides table)."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="+")
    channel_disc_id = SnowflakeField()
    prompt = BoundedTextField(max_length=v.PROMPT_MAX)
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
            *snowflake_checks("channel_prompt", "channel_disc_id"),
            *length_checks("channel_prompt", prompt=v.PROMPT_MAX),
        ]

    def __str__(self) -> str:
        return f"#{self.channel_disc_id} ({self.mode})"
