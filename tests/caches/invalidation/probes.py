"""Reads through each real layer's public getter, built from model rows.

One function per kind of read; each returns a `Probe` (see conftest) naming
the registered layer it reads, so `Layers.warm`, `Layers.fresh` and
`Layers.stale` can serve and check it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from caches.layers import (
    channel_llm,
    channel_prompt,
    channel_whitelist,
    emoji_sticker,
    guild_mcp_config,
    llm,
    novelai_subscription,
    persona_sprite,
    personal_spotlight,
    preset_avatar,
    st_preset,
    tomori_state,
    user,
    webhook,
)
from caches.layers.webhook import CreatedWebhook, PersonaIdentity
from tests.caches.invalidation.conftest import Probe, probe
from tomori import models as m
from tomori.crypto import SecretToken


def state(server: m.Server) -> Probe:
    """The server's personas and settings (tomori_state)."""
    return probe(
        tomori_state.NAME, tomori_state.get_cached_tomori_state, server.server_disc_id
    )


def user_row(row: m.User) -> Probe:
    """The user's row (user)."""
    return probe(user.NAME, user.get_cached_user_row, row.user_disc_id)


def blacklisted(server: m.Server, row: m.User) -> Probe:
    """Whether the user is blacklisted in the server (user's blacklist answers)."""
    return probe(
        user.NAME,
        user.get_cached_blacklist_status,
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
        channel_whitelist.NAME,
        channel_whitelist.get_cached_whitelist_status,
        server.server_disc_id,
        channel,
        parent_disc_id=parent,
        role_ids=None if roles is None else tuple(roles),
    )


def channel_llm_override(server: m.Server, channel: int) -> Probe:
    """The channel's LLM override (channel_llm)."""
    return probe(
        channel_llm.NAME, channel_llm.get_cached_channel_llm, server.pk, channel
    )


def channel_prompt_override(server: m.Server, channel: int) -> Probe:
    """The channel's prompt override (channel_prompt)."""
    return probe(
        channel_prompt.NAME,
        channel_prompt.get_cached_channel_prompt,
        server.pk,
        channel,
    )


def expressions(server: m.Server) -> Probe:
    """The server's stored emojis and stickers (emoji_sticker)."""
    return probe(emoji_sticker.NAME, emoji_sticker.load_emoji_sticker_cache, server.pk)


def sprites(persona_id: int) -> Probe:
    """The persona's sprites (persona_sprite)."""
    return probe(
        persona_sprite.NAME, persona_sprite.get_cached_persona_sprites, persona_id
    )


def spotlight(server: m.Server, row: m.User, channel: int) -> Probe:
    """The user's spotlight in a channel (personal_spotlight, gate included)."""
    return probe(
        personal_spotlight.NAME,
        personal_spotlight.get_cached_personal_spotlight_status,
        server.pk,
        row.pk,
        channel,
    )


def mcp_configs(server: m.Server) -> Probe:
    """The server's MCP configs (guild_mcp_config)."""
    return probe(
        guild_mcp_config.NAME, guild_mcp_config.get_cached_guild_mcp_configs, server.pk
    )


def active_st_preset(server: m.Server) -> Probe:
    """The server's active SillyTavern preset (st_preset)."""
    return probe(st_preset.NAME, st_preset.get_cached_st_preset, server.pk)


def novelai(server: m.Server) -> Probe:
    """The server's NovelAI subscription (novelai_subscription)."""
    return probe(
        novelai_subscription.NAME,
        novelai_subscription.get_cached_novelai_subscription,
        server.pk,
    )


def llm_row(row: m.Llm) -> Probe:
    """One llm (llm, warmed from the whole table)."""
    return probe(llm.NAME, llm.get_llm, row.pk)


def preset_avatar_of(preset: m.PresetPersona) -> Probe:
    """A preset persona's avatar (preset_avatar)."""
    return probe(preset_avatar.NAME, preset_avatar.get_preset_avatar, preset.pk)


class Creator:
    """Creates Discord webhooks for the webhook layer: each a new id."""

    _ids = itertools.count(900_000_000)

    async def __call__(self, channel_disc_id: int) -> CreatedWebhook:
        webhook_id = next(self._ids)
        return CreatedWebhook(webhook_id, SecretToken(f"token-{webhook_id}-secret"))


def channel_webhook(channel: int, server: m.Server | None = None) -> Probe:
    """The channel's shared webhook (webhook; created on a miss if none is stored)."""
    return probe(
        webhook.NAME,
        webhook.get_channel_webhook,
        channel,
        create_webhook=Creator(),
        server_id=None if server is None else server.pk,
    )


def persona_webhook(channel: int, persona: m.Persona) -> Probe:
    """The channel's webhook dressed as the persona as it is now in the database."""
    persona.refresh_from_db()
    identity = PersonaIdentity(persona.pk, persona.name, persona.avatar_url)
    return probe(
        webhook.NAME,
        webhook.get_persona_webhook,
        channel,
        identity,
        create_webhook=Creator(),
    )
