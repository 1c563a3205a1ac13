"""Per-guild integrations: MCP servers and NovelAI subscriptions."""

from __future__ import annotations

from django.db import models

from tomori.domain.models import validation as v
from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import SafeJSONField, SingleLineField
from tomori.domain.models.servers import Server


class GuildMcpServerConfig(CacheFeedingModel):
    """An MCP server a guild has configured, with its tool-name snapshot."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="mcp")
    name = SingleLineField(max_length=v.NAME_MAX)
    url = models.URLField(validators=[v.validate_single_line])
    enabled = models.BooleanField(default=True)
    tool_names = SafeJSONField(
        default=list, blank=True, validators=[v.JsonShapeValidator("list")]
    )
    display_metadata = SafeJSONField(
        default=dict, blank=True, validators=[v.JsonShapeValidator("object")]
    )
    tool_names_updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "guild_mcp_server_configs"
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="mcp_name_unique")
        ]

    def __str__(self) -> str:
        return self.name


class NovelAiSubscription(CacheFeedingModel):
    """A guild's NovelAI subscription tier and context limit."""

    server = models.OneToOneField(
        Server, on_delete=models.CASCADE, related_name="novelai_subscription"
    )
    tier = SingleLineField(max_length=40)
    context_limit = models.PositiveIntegerField()
    checked_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "novelai_subscriptions"

    def __str__(self) -> str:
        return f"{self.tier} ({self.context_limit})"
