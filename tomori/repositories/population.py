"""How many of each thing exist, shown beside a cache's resident size.

A cache size counts entries resident now, which for a lazily expiring cache
means "keys touched since the last restart or invalidation"; the spec lists
reading it as a population count as an anti-pattern. These counts are the
populations operators mistake it for (tomori state size is not the number of
configured servers: that is `server_model_configs` with an API key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import QuerySet

from tomori import models as m


@dataclass(frozen=True, slots=True)
class Population:
    """A count of rows and what they are (`"configured servers"`)."""

    label: str
    count: int


# cache name (registry) -> (label, rows whose count is the population)
POPULATION_QUERIES: dict[str, tuple[str, Callable[[], QuerySet]]] = {
    "tomori_state": (
        "configured servers (API key set)",
        lambda: m.ServerModelConfig.objects.filter(api_key__isnull=False),
    ),
    "user": ("known users", lambda: m.User.objects.all()),
    "emoji_sticker": ("servers", lambda: m.Server.objects.all()),
    "channel_whitelist": (
        "whitelisted channels",
        lambda: m.WhitelistedChannel.objects.all(),
    ),
    "channel_llm": (
        "channel LLM overrides",
        lambda: m.ChannelLlmOverride.objects.all(),
    ),
    "channel_prompt": (
        "channel prompt overrides",
        lambda: m.ChannelPromptOverride.objects.all(),
    ),
    "persona_sprite": ("personas", lambda: m.Persona.objects.all()),
    "persona_sprite_message": (
        "sprite messages stored",
        lambda: m.PersonaSpriteMessage.objects.all(),
    ),
    "personal_spotlight": (
        "spotlight rows",
        lambda: m.PersonalSpotlight.objects.all(),
    ),
    "guild_mcp_config": (
        "servers with MCP servers",
        lambda: m.GuildMcpServerConfig.objects.values("server_id").distinct(),
    ),
    "st_preset": (
        "servers with ST presets",
        lambda: m.StPreset.objects.values("server_id").distinct(),
    ),
    "novelai_subscription": (
        "NovelAI subscriptions",
        lambda: m.NovelAiSubscription.objects.all(),
    ),
    "llm": ("LLM rows", lambda: m.Llm.objects.all()),
    "preset_avatar": ("preset personas", lambda: m.PresetPersona.objects.all()),
    "webhook": ("managed webhooks", lambda: m.ManagedWebhook.objects.all()),
    "short_term_memory": (
        "stored short-term memories",
        lambda: m.ShortTermMemoryRecord.objects.all(),
    ),
}


def cache_populations(
    names: list[str] | None = None, *, using: str = "default"
) -> dict[str, Population]:
    """Return the population behind each named cache, counted in one query."""
    wanted = [n for n in (names or POPULATION_QUERIES) if n in POPULATION_QUERIES]
    if not wanted:
        return {}
    parts: list[str] = []
    params: list[Any] = []
    for index, name in enumerate(wanted):
        queryset = POPULATION_QUERIES[name][1]().order_by()
        sql, part_params = queryset.query.sql_with_params()
        # One scalar subquery per table: a single round trip for the dashboard.
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS p{index})")
        params.extend(part_params)
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return {
        name: Population(POPULATION_QUERIES[name][0], int(count))
        for name, count in zip(wanted, row, strict=True)
    }
