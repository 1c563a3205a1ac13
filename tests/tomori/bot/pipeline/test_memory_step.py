"""The short-term memory step: what a capture keeps, as short-term memory keeps it."""

from __future__ import annotations

from datetime import UTC, datetime

from caches.layers.short_term_memory import ShortTermMemoryEntry, StmMessage
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline.memory import STM_CONTENT_LIMIT, stm_message, turn_messages


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


async def test_a_capture_keeps_what_was_said_since_the_last_one(bot: Bot) -> None:
    guild = busiest_guild(bot.sim.world)
    channel = text_channel(bot.sim.world, guild)
    user = await allowed_member(bot.sim.world, guild)
    for n in range(9):
        await bot.speak(guild, user, channel, f"m{n}")
    said = [m for m in bot.client._connection._messages if m.channel.id == channel]
    said = said[-9:]
    keep = 4  # earlier messages a capture keeps besides its own

    def contents(messages: tuple[StmMessage, ...]) -> list[str]:
        return [m.content for m in messages]

    def entry(messages: tuple[StmMessage, ...]) -> ShortTermMemoryEntry:
        return ShortTermMemoryEntry(
            "k", "server", channel, datetime.now(UTC), messages=messages
        )

    # Nothing stored: the window seeds the conversation.
    first = turn_messages(keep, None, said[:2], said[2], None)
    assert contents(first) == ["m0", "m1", "m2"]
    # Stored at m2; m3 and m4 said since (the window holds m2 too: not twice).
    second = turn_messages(keep, entry(first), said[:5], said[5], None)
    assert contents(second) == ["m1", "m2", "m3", "m4", "m5"]
    assert second[0] is first[1]  # the stored messages are reused, not rebuilt
    # More said since than a capture keeps: the window's latest alone.
    assert contents(turn_messages(keep, entry(first), said[:8], said[8], None)) == [
        "m4", "m5", "m6", "m7", "m8"
    ]  # fmt: skip
    # The window lost everything (a restart): the stored messages serve.
    assert contents(turn_messages(keep, entry(second), [], said[6], None)) == [
        "m2", "m3", "m4", "m5", "m6"
    ]  # fmt: skip
    # A message of the last stored one's millisecond that was not stored is new.
    same_ms = entry((*first[:-1], StmMessage("user", "other", first[-1].timestamp)))
    assert contents(turn_messages(keep, same_ms, said[:3], said[3], None)) == [
        "m0", "m1", "other", "m2", "m3"
    ]  # fmt: skip
