"""Servers (Discord guilds), their model configuration and personas."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import GreaterThanOrEqual

from tomori.domain.models import validation as v
from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import (
    BoundedTextField,
    SingleLineField,
    SnowflakeField,
    length_checks,
)


class Server(CacheFeedingModel):
    """A Discord guild the bot serves; `id` is the internal server id."""

    server_disc_id = SnowflakeField(unique=True)
    name = SingleLineField(max_length=v.NAME_MAX, blank=True)
    tool_use_enabled = models.BooleanField(default=True)
    emoji_usage_enabled = models.BooleanField(default=True)
    sticker_usage_enabled = models.BooleanField(default=True)
    channel_whitelist_enabled = models.BooleanField(
        default=False,
        help_text="When on, the bot answers only in whitelisted channels.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "servers"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(server_disc_id__gt=0), name="server_disc_id_positive"
            )
        ]

    def __str__(self) -> str:
        return self.name or str(self.server_disc_id)


class Llm(CacheFeedingModel):
    """A language model the bot may use (the spec's `llms` table)."""

    provider = SingleLineField(max_length=40)
    codename = SingleLineField(max_length=200)
    display_name = SingleLineField(max_length=200, blank=True)
    is_default = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    supports_tools = models.BooleanField(default=False)
    supports_vision = models.BooleanField(default=False)
    context_length = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        db_table = "llms"
        ordering = ["provider", "codename"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "codename"], name="llm_provider_codename_unique"
            ),
            models.UniqueConstraint(
                fields=["provider"],
                condition=Q(is_default=True),
                name="llm_one_default_per_provider",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.codename}"


class ServerModelConfig(CacheFeedingModel):
    """A server's model configuration; a server is configured when it has an API key."""

    server = models.OneToOneField(
        Server, on_delete=models.CASCADE, related_name="model_config"
    )
    llm = models.ForeignKey(Llm, on_delete=models.SET_NULL, null=True, blank=True)
    api_key = BoundedTextField(
        max_length=v.API_KEY_MAX,
        null=True,
        blank=True,
        validators=[v.validate_api_key],
    )
    temperature = models.FloatField(default=1.0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "server_model_configs"
        indexes = [
            models.Index(
                fields=["server"],
                condition=Q(api_key__isnull=False),
                name="smc_configured_idx",
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(temperature__gte=0) & Q(temperature__lte=2),
                name="smc_temperature_range",
            ),
            # "configured" means a key is set: an empty string would count as one.
            models.CheckConstraint(
                condition=Q(api_key__isnull=True) | ~Q(api_key=""),
                name="smc_api_key_not_blank",
            ),
            *length_checks("smc", api_key=v.API_KEY_MAX),
        ]

    def __str__(self) -> str:
        return f"model config of {self.server}"


class Persona(CacheFeedingModel):
    """A persona ("tomori") of a server: one main persona and any number of alters."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="personas"
    )
    name = SingleLineField(max_length=v.PERSONA_NAME_MAX)
    is_main = models.BooleanField(default=False)
    position = models.PositiveIntegerField(default=0)
    llm = models.ForeignKey(Llm, on_delete=models.SET_NULL, null=True, blank=True)
    system_prompt = BoundedTextField(max_length=v.PROMPT_MAX, blank=True)
    avatar_url = models.URLField(blank=True, validators=[v.validate_single_line])
    tools_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "personas"
        ordering = ["server", "-is_main", "position", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "name"], name="persona_name_unique_per_server"
            ),
            models.UniqueConstraint(
                fields=["server"],
                condition=Q(is_main=True),
                name="persona_one_main_per_server",
            ),
            models.CheckConstraint(
                condition=GreaterThanOrEqual(Length("name"), 1),
                name="persona_name_not_empty",
            ),
            *length_checks("persona", system_prompt=v.PROMPT_MAX),
        ]

    def __str__(self) -> str:
        return self.name
