"""Per-guild integrations: MCP server configs and NovelAI subscriptions."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from tomori.domain.models import GuildMcpServerConfig, NovelAiSubscription
from tomori.domain.repositories._fields import grouped


@dataclass(frozen=True, slots=True)
class McpServerConfigRecord:
    """A guild's MCP server as the caches see it (display metadata left out)."""

    id: int
    name: str
    url: str
    enabled: bool
    tool_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NovelAiSubscriptionRecord:
    """A guild's NovelAI tier and the context limit it grants."""

    tier: str
    context_limit: int


def _mcp_record(row: GuildMcpServerConfig) -> McpServerConfigRecord:
    return McpServerConfigRecord(
        id=row.pk,
        name=row.name,
        url=row.url,
        enabled=row.enabled,
        tool_names=tuple(str(name) for name in row.tool_names or ()),
    )


def list_guild_mcp_configs(server_id: int) -> tuple[McpServerConfigRecord, ...]:
    """Return the guild's MCP server configs, by name."""
    return list_guild_mcp_configs_of([server_id])[server_id]


def list_guild_mcp_configs_of(
    server_ids: Collection[int],
) -> dict[int, tuple[McpServerConfigRecord, ...]]:
    """Return each guild's MCP server configs, by name (one query)."""
    rows = GuildMcpServerConfig.objects.filter(server_id__in=list(server_ids))
    return grouped(
        server_ids,
        rows.order_by("server_id", "name"),
        lambda row: row.server_id,
        _mcp_record,
    )


def get_novelai_subscription(server_id: int) -> NovelAiSubscriptionRecord | None:
    """Return the guild's NovelAI subscription, or None."""
    return get_novelai_subscriptions([server_id])[server_id]


def get_novelai_subscriptions(
    server_ids: Collection[int],
) -> dict[int, NovelAiSubscriptionRecord | None]:
    """Return each guild's NovelAI subscription, or None (one query)."""
    found: dict[int, NovelAiSubscriptionRecord | None] = dict.fromkeys(server_ids)
    rows = NovelAiSubscription.objects.filter(server_id__in=list(found)).values_list(
        "server_id", "tier", "context_limit"
    )
    for server_id, tier, context_limit in rows:
        found[server_id] = NovelAiSubscriptionRecord(tier, context_limit)
    return found


# Writes.


def guild_mcp_config_upsert(
    *, server_id: int, name: str, url: str, enabled: bool = True
) -> McpServerConfigRecord:
    """Create or change a guild's MCP server (by name)."""
    row, _ = GuildMcpServerConfig.objects.update_or_create(
        server_id=server_id, name=name, defaults={"url": url, "enabled": enabled}
    )
    return _mcp_record(row)


def guild_mcp_config_set_tool_names(
    *, config_id: int, tool_names: Sequence[str]
) -> bool:
    """Store a new tool-name snapshot; return False (and write nothing) if unchanged."""
    row = GuildMcpServerConfig.objects.get(pk=config_id)
    names = list(tool_names)
    if list(row.tool_names or ()) == names:
        return False
    row.tool_names = names
    row.tool_names_updated_at = timezone.now()
    row.save(update_fields=["tool_names", "tool_names_updated_at"])
    return True


def guild_mcp_config_set_display_metadata(
    *, config_id: int, metadata: dict[str, Any]
) -> None:
    """Store display metadata (which no cache holds)."""
    row = GuildMcpServerConfig.objects.get(pk=config_id)
    row.display_metadata = metadata
    row.save(update_fields=["display_metadata"])


def guild_mcp_config_delete(*, config_id: int) -> bool:
    """Delete a guild's MCP server config; return whether it existed."""
    row = GuildMcpServerConfig.objects.filter(pk=config_id).first()
    if row is None:
        return False
    row.delete()
    return True


def novelai_subscription_set(
    *, server_id: int, tier: str, context_limit: int
) -> NovelAiSubscriptionRecord:
    """Create or change a guild's NovelAI subscription."""
    NovelAiSubscription.objects.update_or_create(
        server_id=server_id, defaults={"tier": tier, "context_limit": context_limit}
    )
    return NovelAiSubscriptionRecord(tier=tier, context_limit=context_limit)


def novelai_subscription_delete(*, server_id: int) -> bool:
    """Delete a guild's NovelAI subscription; return whether it had one."""
    row = NovelAiSubscription.objects.filter(server_id=server_id).first()
    if row is None:
        return False
    row.delete()
    return True
