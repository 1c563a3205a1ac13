"""Reads through each real layer's public getter, built from model rows.

One function per kind of read; each returns a `Probe` (see conftest) naming
the registered layer it reads, so `Layers.warm`, `Layers.fresh` and
`Layers.stale` can serve and check it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from caches.layers.channel_llm import get_cached_channel_llm
from caches.layers.channel_prompt import get_cached_channel_prompt
from caches.layers.channel_whitelist import get_cached_whitelist_status
from caches.layers.emoji_sticker import load_emoji_sticker_cache
from caches.layers.guild_mcp_config import get_cached_guild_mcp_configs
from caches.layers.llm import get_llm
from caches.layers.novelai_subscription import get_cached_novelai_subscription
from caches.layers.persona_sprite import get_cached_persona_sprites
from caches.layers.personal_spotlight import get_cached_personal_spotlight_status
from caches.layers.preset_avatar import get_preset_avatar
from caches.layers.st_preset import get_cached_st_preset
from caches.layers.tomori_state import get_cached_tomori_state
from caches.layers.user import get_cached_blacklist_status, get_cached_user_row
from caches.layers.webhook import (
    CreatedWebhook,
    PersonaIdentity,
    get_channel_webhook,
    get_persona_webhook,
)
from tests.caches.invalidation.conftest import Probe, probe
from tomori.domain import models as m
from tomori.domain.crypto import SecretToken


def state(server: m.Server) -> Probe:
    """The server's personas and settings (tomori_state)."""
    return probe(get_cached_tomori_state, server.server_disc_id)


def user_row(row: m.User) -> Probe:
    """The user's row (user)."""
    return probe(get_cached_user_row, row.user_disc_id)


def blacklisted(server: m.Server, row: m.User) -> Probe:
    """Whether the user is blacklisted in the server (user's blacklist answers)."""
    return probe(
        get_cached_blacklist_status,
        server.server_disc_id,
        row.user_disc_id,
    )


def whitelist(
    server: m.Server,
    channel: int,
    *,
    parent: int | None = None,
    roles: Iterable[int] | None = None,
) -> Probe:
    """The whitelist decision of a channel, or of a thread under `parent`."""
    return probe(
        get_cached_whitelist_status,
        server.server_disc_id,
        channel,
        parent_disc_id=parent,
        role_ids=None if roles is None else tuple(roles),
    )


def channel_llm_override(server: m.Server, channel: int) -> Probe:
    """The channel's LLM override (channel_llm)."""
    return probe(get_cached_channel_llm, server.pk, channel)


def channel_prompt_override(server: m.Server, channel: int) -> Probe:
    """The channel's prompt override (channel_prompt)."""
    return probe(
        get_cached_channel_prompt,
        server.pk,
        channel,
    )


def expressions(server: m.Server) -> Probe:
    """The server's stored emojis and stickers (emoji_sticker)."""
    return probe(load_emoji_sticker_cache, server.pk)


def sprites(persona_id: int) -> Probe:
    """The persona's sprites (persona_sprite)."""
    return probe(get_cached_persona_sprites, persona_id)


def spotlight(server: m.Server, row: m.User, channel: int) -> Probe:
    """The user's spotlight in a channel (personal_spotlight, gate included)."""
    return probe(
        get_cached_personal_spotlight_status,
        server.pk,
        row.pk,
        channel,
    )


def mcp_configs(server: m.Server) -> Probe:
    """The server's MCP configs (guild_mcp_config)."""
    return probe(get_cached_guild_mcp_configs, server.pk)


def active_st_preset(server: m.Server) -> Probe:
    """The server's active SillyTavern preset (st_preset)."""
    return probe(get_cached_st_preset, server.pk)


def novelai(server: m.Server) -> Probe:
    """The server's NovelAI subscription (novelai_subscription)."""
    return probe(
        get_cached_novelai_subscription,
        server.pk,
    )


def llm_row(row: m.Llm) -> Probe:
    """One llm (llm, warmed from the whole table)."""
    return probe(get_llm, row.pk)


def preset_avatar_of(preset: m.PresetPersona) -> Probe:
    """A preset persona's avatar (preset_avatar)."""
    return probe(get_preset_avatar, preset.pk)


class Creator:
    """Creates Discord webhooks for the webhook layer: each a new id."""

    _ids = itertools.count(900_000_000)

    async def __call__(self, channel_disc_id: int) -> CreatedWebhook:
        webhook_id = next(self._ids)
        return CreatedWebhook(webhook_id, SecretToken(f"token-{webhook_id}-secret"))


def channel_webhook(channel: int, server: m.Server | None = None) -> Probe:
    """The channel's shared webhook (webhook; created on a miss if none is stored)."""
    return probe(
        get_channel_webhook,
        channel,
        create_webhook=Creator(),
        server_id=None if server is None else server.pk,
    )


def persona_webhook(channel: int, persona: m.Persona) -> Probe:
    """The channel's webhook dressed as the persona as it is now in the database."""
    persona.refresh_from_db()
    identity = PersonaIdentity(persona.pk, persona.name, persona.avatar_url)
    return probe(
        get_persona_webhook,
        channel,
        identity,
        create_webhook=Creator(),
    )
