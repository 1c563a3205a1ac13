"""The simulated Discord's state: users, guilds and everything inside them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Channel types, as Discord numbers them.
TEXT_CHANNEL = 0
VOICE_CHANNEL = 2
CATEGORY_CHANNEL = 4
PUBLIC_THREAD = 11

ONLINE_STATUSES = ("online", "idle", "dnd")


@dataclass(slots=True)
class SimUser:
    """A Discord user, with the presence Discord would report for it."""

    id: int
    username: str
    global_name: str | None
    bot: bool = False
    avatar: str | None = None
    status: str = "offline"
    activities: list[dict[str, Any]] = field(default_factory=list)
    client_status: dict[str, str] = field(default_factory=dict)

    @property
    def online(self) -> bool:
        """Return whether the user shows a presence (not offline)."""
        return self.status in ONLINE_STATUSES


@dataclass(slots=True)
class SimMember:
    """A user's membership of one guild."""

    user: SimUser
    joined_at: str
    roles: list[int] = field(default_factory=list)
    nick: str | None = None


@dataclass(slots=True)
class SimRole:
    """A guild role; the @everyone role has the guild's id."""

    id: int
    name: str
    position: int
    permissions: int = 0
    color: int = 0
    hoist: bool = False
    mentionable: bool = False


@dataclass(slots=True)
class SimChannel:
    """A guild channel: category, text, voice or (with parent_id) a thread."""

    id: int
    type: int
    name: str
    position: int = 0
    parent_id: int | None = None
    owner_id: int | None = None
    topic: str | None = None


@dataclass(slots=True)
class SimEmoji:
    """A custom guild emoji."""

    id: int
    name: str
    animated: bool = False


@dataclass(slots=True)
class SimSticker:
    """A custom guild sticker."""

    id: int
    name: str
    tags: str = "smile"
    description: str = ""


@dataclass(slots=True)
class SimWebhook:
    """An incoming webhook on a guild text channel."""

    id: int
    token: str
    guild_id: int
    channel_id: int
    name: str
    creator_id: int | None = None


@dataclass(slots=True)
class SimGuild:
    """A guild with its members, channels, threads, roles and expressions."""

    id: int
    name: str
    owner_id: int
    members: dict[int, SimMember] = field(default_factory=dict)
    roles: list[SimRole] = field(default_factory=list)
    channels: list[SimChannel] = field(default_factory=list)
    threads: list[SimChannel] = field(default_factory=list)
    emojis: list[SimEmoji] = field(default_factory=list)
    stickers: list[SimSticker] = field(default_factory=list)
    webhooks: list[SimWebhook] = field(default_factory=list)
    # user id -> voice channel id of members connected to voice.
    voice: dict[int, int] = field(default_factory=dict)

    @property
    def member_count(self) -> int:
        """Return the guild's member count (what Discord reports)."""
        return len(self.members)

    def channels_of_type(self, channel_type: int) -> list[SimChannel]:
        """Return the guild's (non-thread) channels of one type."""
        return [c for c in self.channels if c.type == channel_type]

    def find_channel(self, channel_id: int) -> SimChannel | None:
        """Return the channel or thread with this id, or None."""
        for channel in (*self.channels, *self.threads):
            if channel.id == channel_id:
                return channel
        return None

    def online_members(self) -> list[SimMember]:
        """Return the members that show a presence."""
        return [m for m in self.members.values() if m.user.online]


@dataclass
class World:
    """Every user and guild of a simulated Discord, plus the bot's own user."""

    bot_user: SimUser
    application_id: int
    guilds: dict[int, SimGuild]
    users: dict[int, SimUser]
    channel_guild: dict[int, int] = field(default_factory=dict)
    webhooks: dict[int, SimWebhook] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for guild in self.guilds.values():
            for channel in (*guild.channels, *guild.threads):
                self.channel_guild[channel.id] = guild.id
            for webhook in guild.webhooks:
                self.webhooks[webhook.id] = webhook

    def guild(self, guild_id: int) -> SimGuild:
        """Return the guild with this id, or raise KeyError."""
        return self.guilds[guild_id]

    def guild_of_channel(self, channel_id: int) -> SimGuild | None:
        """Return the guild holding a channel or thread id, or None."""
        guild_id = self.channel_guild.get(channel_id)
        return None if guild_id is None else self.guilds[guild_id]

    def add_thread(self, guild: SimGuild, thread: SimChannel) -> None:
        """Add a thread to a guild and to the channel index."""
        guild.threads.append(thread)
        self.channel_guild[thread.id] = guild.id

    def add_webhook(self, webhook: SimWebhook) -> None:
        """Add a webhook to its guild and to the webhook index."""
        self.guilds[webhook.guild_id].webhooks.append(webhook)
        self.webhooks[webhook.id] = webhook

    def remove_webhook(self, webhook_id: int) -> SimWebhook | None:
        """Remove a webhook; return it, or None when there was none."""
        webhook = self.webhooks.pop(webhook_id, None)
        if webhook is not None:
            self.guilds[webhook.guild_id].webhooks.remove(webhook)
        return webhook

    def guilds_for_shard(self, shard_id: int, shard_count: int) -> list[SimGuild]:
        """Return the guilds Discord routes to one shard: (id >> 22) % count."""
        return [
            g for g in self.guilds.values() if shard_of(g.id, shard_count) == shard_id
        ]

    def totals(self) -> dict[str, int]:
        """Return object counts as discord.py would cache them after chunking."""
        guilds = list(self.guilds.values())
        return {
            "guilds": len(guilds),
            "members": sum(g.member_count for g in guilds),
            "users": len(self.users),
            "channels": sum(len(g.channels) + len(g.threads) for g in guilds),
            "threads": sum(len(g.threads) for g in guilds),
            "roles": sum(len(g.roles) for g in guilds),
            "emojis": sum(len(g.emojis) for g in guilds),
            "stickers": sum(len(g.stickers) for g in guilds),
            "presences": sum(len(g.online_members()) for g in guilds),
            "voice_states": sum(len(g.voice) for g in guilds),
            "bot_members": sum(
                1 for g in guilds for m in g.members.values() if m.user.bot
            ),
            "webhooks": len(self.webhooks),
        }


def shard_of(guild_id: int, shard_count: int) -> int:
    """Return the shard Discord sends a guild's events to."""
    return (guild_id >> 22) % shard_count
