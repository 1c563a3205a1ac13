"""Gateway event payloads: READY, GUILD_CREATE and messages, as Discord sends them."""

from __future__ import annotations

from collections.abc import Iterable

from tomori.bot.simulator.intents import GUILD_PRESENCES
from tomori.bot.simulator.payloads import (
    Payload,
    channel_payload,
    emoji_payload,
    member_payload,
    presence_payload,
    role_payload,
    sticker_payload,
    thread_payload,
    user_payload,
    voice_state_payload,
)
from tomori.bot.simulator.snowflake import snowflake_iso
from tomori.bot.simulator.world import SimGuild, SimMember, SimWebhook, World


def _members_sent(
    guild: SimGuild, bot_id: int, *, intents: int, large_threshold: int
) -> Iterable[SimMember]:
    """Return the members Discord puts in GUILD_CREATE for these intents."""
    if intents & GUILD_PRESENCES and guild.member_count <= large_threshold:
        return guild.members.values()
    # Large guilds, or no presence intent: the bot, voice members and (with
    # the presence intent) online members; the rest must be chunked.
    online = intents & GUILD_PRESENCES
    return [
        m
        for uid, m in guild.members.items()
        if uid == bot_id or uid in guild.voice or (online and m.user.online)
    ]


def guild_create_payload(
    world: World, guild: SimGuild, *, intents: int, large_threshold: int = 250
) -> Payload:
    """Return a full GUILD_CREATE for a guild, filtered as Discord filters it."""
    members = list(
        _members_sent(
            guild, world.bot_user.id, intents=intents, large_threshold=large_threshold
        )
    )
    presences = (
        [presence_payload(m.user) for m in members if m.user.online]
        if intents & GUILD_PRESENCES
        else []
    )
    data = _guild_fields(guild)
    data.update(
        member_count=guild.member_count,
        large=guild.member_count > large_threshold,
        joined_at=guild.members[world.bot_user.id].joined_at,
        members=[member_payload(m) for m in members],
        presences=presences,
        voice_states=[voice_state_payload(guild, u, c) for u, c in guild.voice.items()],
        channels=[channel_payload(c) for c in guild.channels],
        threads=[thread_payload(t, guild.id) for t in guild.threads],
    )
    return data


def _guild_fields(guild: SimGuild) -> Payload:
    """Return the guild object's own fields (what GUILD_UPDATE also carries)."""
    return {
        "id": str(guild.id),
        "name": guild.name,
        "icon": None,
        "splash": None,
        "banner": None,
        "description": None,
        "owner_id": str(guild.owner_id),
        "unavailable": False,
        "roles": [role_payload(r) for r in guild.roles],
        "emojis": [emoji_payload(e) for e in guild.emojis],
        "stickers": [sticker_payload(s, guild.id) for s in guild.stickers],
        "features": [],
        "verification_level": 1,
        "default_message_notifications": 1,
        "explicit_content_filter": 2,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "preferred_locale": "en-US",
        "afk_timeout": 300,
        "afk_channel_id": None,
        "system_channel_id": None,
        "system_channel_flags": 0,
        "rules_channel_id": None,
        "public_updates_channel_id": None,
        "application_id": None,
        "max_members": 500000,
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
    }


def ready_payload(
    world: World,
    guild_ids: Iterable[int],
    *,
    session_id: str,
    resume_gateway_url: str,
    shard: list[int] | None,
) -> Payload:
    """Return READY: the bot user, unavailable guild stubs and the session."""
    user = user_payload(world.bot_user)
    user.update(verified=True, mfa_enabled=False, email=None)
    data: Payload = {
        "v": 10,
        "user": user,
        "guilds": [{"id": str(gid), "unavailable": True} for gid in guild_ids],
        "session_id": session_id,
        "session_type": "normal",
        "resume_gateway_url": resume_gateway_url,
        "application": {"id": str(world.application_id), "flags": 0},
        "private_channels": [],
        "relationships": [],
        "presences": [],
        "guild_join_requests": [],
        "geo_ordered_rtc_regions": ["local"],
        "user_settings": {},
        "_trace": ['["simulated-gateway",{"micros":0}]'],
    }
    if shard is not None:
        data["shard"] = list(shard)
    return data


def message_payload(
    *,
    message_id: int,
    channel_id: int,
    author: Payload,
    content: str,
    guild_id: int | None = None,
    member: Payload | None = None,
    mentions: list[Payload] | None = None,
    webhook_id: int | None = None,
) -> Payload:
    """Return a message object; guild messages carry guild_id and member."""
    data: Payload = {
        "id": str(message_id),
        "type": 0,
        "channel_id": str(channel_id),
        "author": author,
        "content": content,
        "timestamp": snowflake_iso(message_id),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": mentions or [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "components": [],
        "pinned": False,
        "flags": 0,
    }
    if guild_id is not None:
        data["guild_id"] = str(guild_id)
    if member is not None:
        data["member"] = member
    if webhook_id is not None:
        data["webhook_id"] = str(webhook_id)
    return data


def mention_payload(member: SimMember) -> Payload:
    """Return a user mention as guild messages carry it (user plus member)."""
    data = user_payload(member.user)
    data["member"] = member_payload(member, with_user=False)
    return data


def webhook_author_payload(webhook: SimWebhook, username: str | None = None) -> Payload:
    """Return the author a webhook message shows (the webhook as a bot user)."""
    return {
        "id": str(webhook.id),
        "username": username or webhook.name,
        "discriminator": "0000",
        "avatar": None,
        "bot": True,
        "global_name": None,
        "public_flags": 0,
        "flags": 0,
    }
