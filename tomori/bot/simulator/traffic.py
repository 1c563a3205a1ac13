"""Who says what where: the seeded message mix that drives simulated traffic."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tomori.bot.simulator import names
from tomori.bot.simulator.distributions import ZipfPicker
from tomori.bot.simulator.scenario import Scenario
from tomori.bot.simulator.world import (
    TEXT_CHANNEL,
    SimGuild,
    SimMember,
    SimWebhook,
    World,
)


@dataclass(frozen=True)
class PlannedMessage:
    """One message to dispatch: from a member, or (author None) from a webhook."""

    guild: SimGuild
    channel_id: int
    author: SimMember | None
    webhook: SimWebhook | None
    content: str
    mentions_bot: bool

    @property
    def kind(self) -> str:
        """Return "webhook", "bot" or "member"."""
        if self.author is None:
            return "webhook"
        return "bot" if self.author.user.bot else "member"


@dataclass(frozen=True)
class _GuildMix:
    humans: list[SimMember]
    human_picker: ZipfPicker | None
    bots: list[SimMember]
    texts: list[int]
    text_picker: ZipfPicker


class TrafficModel:
    """Draw messages: Zipf over guilds (largest first), members and channels."""

    def __init__(self, world: World, scenario: Scenario):
        self._world = world
        self._scenario = scenario
        self._rng = random.Random(f"{scenario.seed}:traffic")
        self._guilds = sorted(
            world.guilds.values(), key=lambda g: (-g.member_count, g.id)
        )
        self._guild_picker = ZipfPicker(len(self._guilds), scenario.guild_zipf_s)
        self._mixes: dict[int, _GuildMix] = {}

    def next(self) -> PlannedMessage:
        """Return the next message of the seeded stream."""
        rng = self._rng
        guild = self._guilds[self._guild_picker.pick(rng)]
        mix = self._mix(guild)
        roll = rng.random()
        webhook_share = self._scenario.webhook_message_fraction
        if roll < webhook_share and guild.webhooks:
            return self._webhook_message(guild, rng.choice(guild.webhooks))
        bot_share = webhook_share + self._scenario.bot_message_fraction
        if (roll < bot_share and mix.bots) or not mix.humans:
            author = rng.choice(mix.bots)
        else:
            assert mix.human_picker is not None
            author = mix.humans[mix.human_picker.pick(rng)]
        return self._member_message(guild, author, self._channel(guild, mix))

    def _channel(self, guild: SimGuild, mix: _GuildMix) -> int:
        rng = self._rng
        if guild.threads and rng.random() < self._scenario.thread_message_fraction:
            return rng.choice(guild.threads).id
        return mix.texts[mix.text_picker.pick(rng)]

    def _member_message(
        self, guild: SimGuild, author: SimMember, channel_id: int
    ) -> PlannedMessage:
        mentions_bot = self._rng.random() < self._scenario.mention_bot_fraction
        content = names.sentence(self._rng)
        if mentions_bot:
            content = f"<@{self._world.bot_user.id}> {content}"
        return PlannedMessage(guild, channel_id, author, None, content, mentions_bot)

    def _webhook_message(self, guild: SimGuild, webhook: SimWebhook) -> PlannedMessage:
        content = names.sentence(self._rng)
        return PlannedMessage(guild, webhook.channel_id, None, webhook, content, False)

    def _mix(self, guild: SimGuild) -> _GuildMix:
        mix = self._mixes.get(guild.id)
        if mix is None:
            mix = self._mixes[guild.id] = self._build_mix(guild)
        return mix

    def _build_mix(self, guild: SimGuild) -> _GuildMix:
        bot_id = self._world.bot_user.id
        others = [m for uid, m in guild.members.items() if uid != bot_id]
        humans = [m for m in others if not m.user.bot]
        # A fixed per-guild shuffle decides who the chatty members are.
        random.Random(f"{self._scenario.seed}:{guild.id}").shuffle(humans)
        texts = [c.id for c in guild.channels if c.type == TEXT_CHANNEL]
        return _GuildMix(
            humans=humans,
            human_picker=(
                ZipfPicker(len(humans), self._scenario.user_zipf_s) if humans else None
            ),
            bots=[m for m in others if m.user.bot] or others,
            texts=texts,
            text_picker=ZipfPicker(len(texts), self._scenario.channel_zipf_s),
        )
