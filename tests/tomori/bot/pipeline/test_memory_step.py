"""The short-term memory step: a discord.py message as short-term memory keeps it."""

from __future__ import annotations

from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline.memory import STM_CONTENT_LIMIT, stm_message


async def test_a_kept_message_has_discord_pys_fields(bot: Bot) -> None:
    guild = busiest_guild(bot.sim.world)
    channel = text_channel(bot.sim.world, guild)
    user = await allowed_member(bot.sim.world, guild)
    await bot.speak(guild, user, channel, "x" * (STM_CONTENT_LIMIT + 20))
    message = bot.client._connection._messages[-1]

    kept = stm_message(message, self_id=None)

    # The timestamp comes from the snowflake without discord.py's datetime.
    assert kept.timestamp == message.created_at
    assert kept.timestamp.tzinfo == message.created_at.tzinfo
    assert kept.content == message.content[:STM_CONTENT_LIMIT]
    assert (kept.role, kept.speaker) == ("user", message.author.display_name)
    assert stm_message(message, self_id=message.author.id).role == "assistant"
