"""How many of each thing exist, shown beside a cache's resident size.

A cache size counts entries resident now, which for a lazily expiring cache
means "keys touched since the last restart or invalidation"; the spec lists
reading it as a population count as an anti-pattern. These counts are the
populations operators mistake it for (tomori state size is not the number of
configured servers: that is `server_model_configs` with an API key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import QuerySet

from tomori.domain import models as m


@dataclass(frozen=True, slots=True)
class Population:
    """A count of rows and what they are (`"configured servers"`)."""

    label: str
    count: int


Rows = Callable[[], QuerySet[Any, Any]]


def configured_servers() -> QuerySet[Any, Any]:
    """Return the servers with an API key set (one row each)."""
    return m.ServerModelConfig.objects.filter(api_key__isnull=False)


def known_users() -> QuerySet[Any, Any]:
    """Return every user row."""
    return m.User.objects.all()


def servers() -> QuerySet[Any, Any]:
    """Return every server row."""
    return m.Server.objects.all()


def whitelisted_channels() -> QuerySet[Any, Any]:
    """Return every whitelisted channel row."""
    return m.WhitelistedChannel.objects.all()


def channel_llm_overrides() -> QuerySet[Any, Any]:
    """Return every channel LLM override row."""
    return m.ChannelLlmOverride.objects.all()


def channel_prompt_overrides() -> QuerySet[Any, Any]:
    """Return every channel prompt override row."""
    return m.ChannelPromptOverride.objects.all()


def personas() -> QuerySet[Any, Any]:
    """Return every persona row."""
    return m.Persona.objects.all()


def sprite_messages() -> QuerySet[Any, Any]:
    """Return every stored sprite message row."""
    return m.PersonaSpriteMessage.objects.all()


def spotlights() -> QuerySet[Any, Any]:
    """Return every personal spotlight row."""
    return m.PersonalSpotlight.objects.all()


def servers_with_mcp_servers() -> QuerySet[Any, Any]:
    """Return one row per server that has an MCP server config."""
    return m.GuildMcpServerConfig.objects.values("server_id").distinct()


def servers_with_st_presets() -> QuerySet[Any, Any]:
    """Return one row per server that has an ST preset."""
    return m.StPreset.objects.values("server_id").distinct()


def novelai_subscriptions() -> QuerySet[Any, Any]:
    """Return every NovelAI subscription row."""
    return m.NovelAiSubscription.objects.all()


def llms() -> QuerySet[Any, Any]:
    """Return every llms row."""
    return m.Llm.objects.all()


def preset_personas() -> QuerySet[Any, Any]:
    """Return every preset persona row."""
    return m.PresetPersona.objects.all()


def managed_webhooks() -> QuerySet[Any, Any]:
    """Return every managed webhook row."""
    return m.ManagedWebhook.objects.all()


def stored_short_term_memories() -> QuerySet[Any, Any]:
    """Return every stored short-term memory row."""
    return m.ShortTermMemoryRecord.objects.all()


def cache_populations(
    queries: Mapping[str, tuple[str, Rows]], *, using: str = "default"
) -> dict[str, Population]:
    """Return the population of each cache, {name: (label, rows)}, in one query.

    The layers declare which population each is mistaken for
    (`Layer.mistaken_for`); the caller passes those it wants counted.
    """
    wanted = list(queries)
    if not wanted:
        return {}
    parts: list[str] = []
    params: list[Any] = []
    for index, name in enumerate(wanted):
        queryset = queries[name][1]().order_by()
        sql, part_params = queryset.query.sql_with_params()
        # One scalar subquery per table: a single round trip for the dashboard.
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS p{index})")
        params.extend(part_params)
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return {
        name: Population(queries[name][0], int(count))
        for name, count in zip(wanted, row, strict=True)
    }
