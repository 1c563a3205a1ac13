"""Things that happen in the simulated guilds, turned into gateway events."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tomori.bot.simulator.event_payloads import (
    mention_payload,
    message_payload,
    webhook_author_payload,
)
from tomori.bot.simulator.payloads import (
    Payload,
    emoji_payload,
    member_payload,
    presence_payload,
    thread_payload,
    user_payload,
    voice_state_payload,
)
from tomori.bot.simulator.snowflake import SnowflakeFactory
from tomori.bot.simulator.world import (
    PUBLIC_THREAD,
    SimChannel,
    SimEmoji,
    SimGuild,
    World,
)

_MENTION = re.compile(r"<@!?(\d+)>")
_UNSET: Any = object()


class GuildActions:
    """Helpers that change the world and dispatch what Discord would send.

    Subclasses provide world, ids and dispatch(guild_id, event, payload).
    Every helper returns once the event is written to the owning shard.
    """

    world: World
    ids: SnowflakeFactory

    async def dispatch(self, guild_id: int, event: str, payload: Payload) -> bool:
        raise NotImplementedError

    async def member_speaks(
        self, guild_id: int, user_id: int, channel_id: int, content: str
    ) -> int:
        """Dispatch a MESSAGE_CREATE from a member; return the message id.

        Mentions written as <@id> in content are resolved like Discord does.
        """
        guild = self.world.guild(guild_id)
        member = guild.members[user_id]
        self._require_channel(guild, channel_id)
        message_id = self.ids.next()
        mentioned = [int(x) for x in _MENTION.findall(content)]
        payload = message_payload(
            message_id=message_id,
            channel_id=channel_id,
            author=user_payload(member.user),
            content=content,
            guild_id=guild_id,
            member=member_payload(member, with_user=False),
            mentions=[
                mention_payload(guild.members[u])
                for u in mentioned
                if u in guild.members
            ],
        )
        await self.dispatch(guild_id, "MESSAGE_CREATE", payload)
        return message_id

    async def webhook_speaks(
        self, webhook_id: int, content: str, *, username: str | None = None
    ) -> int:
        """Dispatch a MESSAGE_CREATE posted by a webhook; return the message id."""
        webhook = self.world.webhooks[webhook_id]
        message_id = self.ids.next()
        payload = message_payload(
            message_id=message_id,
            channel_id=webhook.channel_id,
            author=webhook_author_payload(webhook, username),
            content=content,
            guild_id=webhook.guild_id,
            webhook_id=webhook.id,
        )
        await self.dispatch(webhook.guild_id, "MESSAGE_CREATE", payload)
        return message_id

    async def voice_join(
        self, guild_id: int, user_id: int, channel_id: int | None
    ) -> bool:
        """Move a member into a voice channel (None: disconnect); dispatch it."""
        guild = self.world.guild(guild_id)
        if channel_id is None:
            guild.voice.pop(user_id, None)
        else:
            self._require_channel(guild, channel_id)
            guild.voice[user_id] = channel_id
        payload = voice_state_payload(guild, user_id, channel_id, with_member=True)
        return await self.dispatch(guild_id, "VOICE_STATE_UPDATE", payload)

    async def voice_leave(self, guild_id: int, user_id: int) -> bool:
        """Disconnect a member from voice; dispatch it."""
        return await self.voice_join(guild_id, user_id, None)

    async def presence_update(
        self,
        user_id: int,
        *,
        status: str = "online",
        activities: Sequence[Payload] = (),
        guild_id: int | None = None,
    ) -> int:
        """Change a user's presence; dispatch it to one guild or all it shares.

        Returns how many PRESENCE_UPDATE events were delivered.
        """
        user = self.world.users[user_id]
        user.status = status
        user.activities = [dict(a) for a in activities]
        user.client_status = {} if status == "offline" else {"desktop": status}
        guild_ids = [guild_id] if guild_id is not None else self._guilds_of(user_id)
        delivered = 0
        for gid in guild_ids:
            payload = presence_payload(user, gid)
            delivered += await self.dispatch(gid, "PRESENCE_UPDATE", payload)
        return delivered

    async def member_update(
        self,
        guild_id: int,
        user_id: int,
        *,
        nick: str | None = _UNSET,
        roles: Sequence[int] | None = None,
    ) -> bool:
        """Change a member's nick and/or roles; dispatch GUILD_MEMBER_UPDATE."""
        member = self.world.guild(guild_id).members[user_id]
        if nick is not _UNSET:
            member.nick = nick
        if roles is not None:
            member.roles = [int(r) for r in roles]
        payload = member_payload(member)
        payload["guild_id"] = str(guild_id)
        return await self.dispatch(guild_id, "GUILD_MEMBER_UPDATE", payload)

    def make_emoji(self, name: str, *, animated: bool = False) -> Payload:
        """Return a new custom emoji payload (with a fresh id) for emojis_update."""
        return emoji_payload(SimEmoji(self.ids.next(), name, animated))

    async def emojis_update(
        self, guild_id: int, emojis: Sequence[Payload] | None = None
    ) -> list[Payload]:
        """Replace a guild's emojis (default: add one); dispatch the full set."""
        guild = self.world.guild(guild_id)
        if emojis is None:
            emojis = [*map(emoji_payload, guild.emojis), self.make_emoji("new_emoji")]
        guild.emojis = [
            SimEmoji(int(e["id"]), str(e["name"]), bool(e.get("animated")))
            for e in emojis
        ]
        sent = [emoji_payload(e) for e in guild.emojis]
        await self.dispatch(
            guild_id, "GUILD_EMOJIS_UPDATE", {"guild_id": str(guild_id), "emojis": sent}
        )
        return sent

    async def webhooks_update(self, guild_id: int, channel_id: int) -> bool:
        """Dispatch WEBHOOKS_UPDATE for a channel."""
        payload = {"guild_id": str(guild_id), "channel_id": str(channel_id)}
        return await self.dispatch(guild_id, "WEBHOOKS_UPDATE", payload)

    async def thread_create(
        self, guild_id: int, parent_id: int, name: str, *, owner_id: int | None = None
    ) -> int:
        """Create a public thread under a text channel; return its id."""
        guild = self.world.guild(guild_id)
        self._require_channel(guild, parent_id)
        thread = SimChannel(
            self.ids.next(),
            PUBLIC_THREAD,
            name,
            parent_id=parent_id,
            owner_id=owner_id or self.world.bot_user.id,
        )
        self.world.add_thread(guild, thread)
        payload = thread_payload(thread, guild_id)
        payload["newly_created"] = True
        await self.dispatch(guild_id, "THREAD_CREATE", payload)
        return thread.id

    def _guilds_of(self, user_id: int) -> list[int]:
        return [g.id for g in self.world.guilds.values() if user_id in g.members]

    def _require_channel(self, guild: SimGuild, channel_id: int) -> None:
        if self.world.channel_guild.get(channel_id) != guild.id:
            raise KeyError(f"guild {guild.id} has no channel {channel_id}")
