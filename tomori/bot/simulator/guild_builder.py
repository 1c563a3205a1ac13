"""Fill one generated guild: roles, members, channels, threads, expressions, voice."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from tomori.bot.simulator import names
from tomori.bot.simulator.distributions import apportion
from tomori.bot.simulator.scenario import Scenario
from tomori.bot.simulator.snowflake import (
    RandomSnowflakes,
    snowflake_iso,
    snowflake_unix_ms,
)
from tomori.bot.simulator.world import (
    CATEGORY_CHANNEL,
    PUBLIC_THREAD,
    TEXT_CHANNEL,
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

_EVERYONE_PERMISSIONS = 0x6_3584_C0E41  # A common @everyone permission set.


@dataclass(frozen=True)
class GuildCounts:
    roles: int
    channels: int
    emojis: int
    stickers: int


@dataclass(frozen=True)
class GuildPlan:
    """Per-guild object counts, split over guilds by the square root of size."""

    roles: list[int]
    channels: list[int]
    emojis: list[int]
    stickers: list[int]

    @classmethod
    def of(cls, scenario: Scenario, sizes: list[int]) -> GuildPlan:
        weights = [size**0.5 for size in sizes]
        return cls(
            # Every guild has @everyone, a category, a text and a voice channel.
            roles=apportion(scenario.roles_total, weights, minimum=1),
            channels=apportion(scenario.channels_total, weights, minimum=3),
            # Discord's caps at the highest boost tier.
            emojis=apportion(scenario.emojis_total, weights, cap=250),
            stickers=apportion(scenario.stickers_total, weights, cap=60),
        )

    def for_guild(self, index: int) -> GuildCounts:
        return GuildCounts(
            self.roles[index],
            self.channels[index],
            self.emojis[index],
            self.stickers[index],
        )


class GuildBuilder:
    """Fill one guild with roles, members, channels, expressions and voice."""

    def __init__(
        self,
        scenario: Scenario,
        counts: GuildCounts,
        rng: random.Random,
        ids: RandomSnowflakes,
    ):
        self.scenario = scenario
        self.counts = counts
        self.rng = rng
        self.ids = ids

    def guild(self, guild_id: int, users: list[SimUser]) -> SimGuild:
        rng = self.rng
        humans = [u for u in users if not u.bot] or users
        guild = SimGuild(
            id=guild_id, name=names.guild_name(rng), owner_id=rng.choice(humans).id
        )
        guild.roles = self.roles(guild_id)
        for user in users:
            guild.members[user.id] = self.member(guild, user)
        guild.channels = self.channels()
        guild.threads = self.threads(guild)
        guild.emojis = [self.emoji() for _ in range(self.counts.emojis)]
        guild.stickers = [self.sticker() for _ in range(self.counts.stickers)]
        guild.voice = self.voice(guild)
        guild.webhooks = self.webhooks(guild)
        return guild

    def roles(self, guild_id: int) -> list[SimRole]:
        everyone = SimRole(guild_id, "@everyone", 0, _EVERYONE_PERMISSIONS)
        others = [
            SimRole(
                self.ids.make(),
                names.channel_name(self.rng).replace("-", " ").title(),
                position,
                color=self.rng.randrange(0x1000000),
                hoist=self.rng.random() < 0.3,
                mentionable=self.rng.random() < 0.2,
            )
            for position in range(1, self.counts.roles)
        ]
        return [everyone, *others]

    def member(self, guild: SimGuild, user: SimUser) -> SimMember:
        rng = self.rng
        joined = snowflake_iso(self.ids.make(after_ms=snowflake_unix_ms(guild.id)))
        extra = [r.id for r in guild.roles[1:]]
        roles = rng.sample(extra, k=min(len(extra), rng.randint(0, 3)))
        nick = names.display_name(names.username(rng)) if rng.random() < 0.1 else None
        return SimMember(user=user, joined_at=joined, roles=roles, nick=nick)

    def channels(self) -> list[SimChannel]:
        categories, texts, voices, _ = self._channel_mix()
        made = [
            SimChannel(self.ids.make(), CATEGORY_CHANNEL, f"category {i + 1}", i)
            for i in range(categories)
        ]
        for position in range(texts + voices):
            kind = TEXT_CHANNEL if position < texts else VOICE_CHANNEL
            name = names.channel_name(self.rng) if kind == TEXT_CHANNEL else "voice"
            parent = made[position % categories].id
            topic = names.sentence(self.rng) if kind == TEXT_CHANNEL else None
            made.append(
                SimChannel(self.ids.make(), kind, name, position, parent, topic=topic)
            )
        return made

    def threads(self, guild: SimGuild) -> list[SimChannel]:
        *_, count = self._channel_mix()
        texts = guild.channels_of_type(TEXT_CHANNEL)
        owners = list(guild.members)
        return [
            SimChannel(
                self.ids.make(),
                PUBLIC_THREAD,
                names.sentence(self.rng)[:30],
                parent_id=self.rng.choice(texts).id,
                owner_id=self.rng.choice(owners),
            )
            for _ in range(count)
        ]

    def _channel_mix(self) -> tuple[int, int, int, int]:
        """Return (categories, text, voice, threads) for this guild's channels."""
        total = self.counts.channels
        scenario = self.scenario
        threads = int(total * scenario.thread_fraction)
        categories = max(1, round(total * scenario.category_fraction))
        voices = max(1, round(total * scenario.voice_channel_fraction))
        texts = total - threads - categories - voices
        if texts < 1:  # Tiny guilds: give up threads first, then voice rooms.
            threads = max(0, threads + texts - 1)
            texts = max(1, total - threads - categories - voices)
            voices = max(1, total - threads - categories - texts)
        return categories, texts, voices, threads

    def emoji(self) -> SimEmoji:
        name = names.username(self.rng).replace("_", "")
        return SimEmoji(self.ids.make(), name, animated=self.rng.random() < 0.2)

    def sticker(self) -> SimSticker:
        name = names.guild_name(self.rng)
        return SimSticker(self.ids.make(), name, description=names.sentence(self.rng))

    def voice(self, guild: SimGuild) -> dict[int, int]:
        rooms = guild.channels_of_type(VOICE_CHANNEL)
        candidates = [
            m.user.id
            for m in guild.online_members()
            if m.user.id != self.scenario.bot_user_id
        ]
        count = min(
            len(candidates), round(guild.member_count * self.scenario.voice_fraction)
        )
        seated = self.rng.sample(candidates, k=count) if rooms else []
        return {user_id: self.rng.choice(rooms).id for user_id in seated}

    def webhooks(self, guild: SimGuild) -> list[SimWebhook]:
        if self.rng.random() >= self.scenario.webhook_guild_fraction:
            return []
        channel = self.rng.choice(guild.channels_of_type(TEXT_CHANNEL))
        token = "".join(self.rng.choices(_TOKEN_ALPHABET, k=68))
        return [
            SimWebhook(
                self.ids.make(),
                token,
                guild.id,
                channel.id,
                f"{names.guild_name(self.rng)} Hook",
                creator_id=guild.owner_id,
            )
        ]


_TOKEN_ALPHABET = string.ascii_letters + string.digits + "-_"
