"""Gateway and REST payloads shaped as Discord sends them (ids as strings)."""

from __future__ import annotations

from typing import Any

from tomori.bot.simulator.snowflake import snowflake_iso
from tomori.bot.simulator.world import (
    CATEGORY_CHANNEL,
    PUBLIC_THREAD,
    VOICE_CHANNEL,
    SimChannel,
    SimEmoji,
    SimGuild,
    SimMember,
    SimRole,
    SimSticker,
    SimUser,
    SimWebhook,
)

Payload = dict[str, Any]


def user_payload(user: SimUser) -> Payload:
    """Return a user object."""
    return {
        "id": str(user.id),
        "username": user.username,
        "global_name": user.global_name,
        "discriminator": "0",
        "avatar": user.avatar,
        "bot": user.bot,
        "public_flags": 0,
        "flags": 0,
        "banner": None,
        "accent_color": None,
        "avatar_decoration_data": None,
        "primary_guild": None,
    }


def member_payload(member: SimMember, *, with_user: bool = True) -> Payload:
    """Return a guild member object; messages carry it without the user."""
    data: Payload = {
        "roles": [str(role_id) for role_id in member.roles],
        "nick": member.nick,
        "avatar": None,
        "banner": None,
        "joined_at": member.joined_at,
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "pending": False,
        "communication_disabled_until": None,
        "flags": 0,
    }
    if with_user:
        data["user"] = user_payload(member.user)
    return data


def presence_payload(user: SimUser, guild_id: int | None = None) -> Payload:
    """Return a presence; in GUILD_CREATE the guild_id is left out."""
    data: Payload = {
        "user": {"id": str(user.id)},
        "status": user.status,
        "activities": [dict(activity) for activity in user.activities],
        "client_status": dict(user.client_status),
    }
    if guild_id is not None:
        data["guild_id"] = str(guild_id)
    return data


def voice_state_payload(
    guild: SimGuild, user_id: int, channel_id: int | None, *, with_member: bool = False
) -> Payload:
    """Return a voice state; VOICE_STATE_UPDATE carries guild_id and member."""
    data: Payload = {
        "user_id": str(user_id),
        "channel_id": None if channel_id is None else str(channel_id),
        "session_id": f"{user_id:x}"[-32:],
        "deaf": False,
        "mute": False,
        "self_deaf": False,
        "self_mute": False,
        "self_stream": False,
        "self_video": False,
        "suppress": False,
        "request_to_speak_timestamp": None,
    }
    if with_member:
        data["guild_id"] = str(guild.id)
        data["member"] = member_payload(guild.members[user_id])
    return data


def role_payload(role: SimRole) -> Payload:
    """Return a role object."""
    return {
        "id": str(role.id),
        "name": role.name,
        "color": role.color,
        "colors": {
            "primary_color": role.color,
            "secondary_color": None,
            "tertiary_color": None,
        },
        "hoist": role.hoist,
        "icon": None,
        "unicode_emoji": None,
        "position": role.position,
        "permissions": str(role.permissions),
        "managed": False,
        "mentionable": role.mentionable,
        "flags": 0,
    }


def channel_payload(channel: SimChannel, guild_id: int | None = None) -> Payload:
    """Return a guild channel object (GUILD_CREATE leaves guild_id out)."""
    data: Payload = {
        "id": str(channel.id),
        "type": channel.type,
        "name": channel.name,
        "position": channel.position,
        "parent_id": None if channel.parent_id is None else str(channel.parent_id),
        "permission_overwrites": [],
        "nsfw": False,
        "flags": 0,
    }
    if channel.type == VOICE_CHANNEL:
        data.update(bitrate=64000, user_limit=0, rtc_region=None, rate_limit_per_user=0)
    elif channel.type != CATEGORY_CHANNEL:
        data.update(topic=channel.topic, rate_limit_per_user=0, last_message_id=None)
    if guild_id is not None:
        data["guild_id"] = str(guild_id)
    return data


def thread_payload(thread: SimChannel, guild_id: int) -> Payload:
    """Return a public thread object; threads always carry guild_id."""
    created = snowflake_iso(thread.id)
    return {
        "id": str(thread.id),
        "type": PUBLIC_THREAD,
        "guild_id": str(guild_id),
        "parent_id": str(thread.parent_id),
        "owner_id": str(thread.owner_id),
        "name": thread.name,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "total_message_sent": 0,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": created,
            "locked": False,
            "create_timestamp": created,
        },
    }


def emoji_payload(emoji: SimEmoji) -> Payload:
    """Return a custom emoji object."""
    return {
        "id": str(emoji.id),
        "name": emoji.name,
        "roles": [],
        "require_colons": True,
        "managed": False,
        "animated": emoji.animated,
        "available": True,
    }


def sticker_payload(sticker: SimSticker, guild_id: int) -> Payload:
    """Return a guild sticker object."""
    return {
        "id": str(sticker.id),
        "name": sticker.name,
        "tags": sticker.tags,
        "type": 2,
        "format_type": 1,
        "description": sticker.description,
        "available": True,
        "guild_id": str(guild_id),
    }


def webhook_payload(webhook: SimWebhook, creator: SimUser | None = None) -> Payload:
    """Return an incoming webhook object, token included."""
    return {
        "id": str(webhook.id),
        "type": 1,
        "guild_id": str(webhook.guild_id),
        "channel_id": str(webhook.channel_id),
        "name": webhook.name,
        "avatar": None,
        "token": webhook.token,
        "application_id": None,
        "user": None if creator is None else user_payload(creator),
    }
