"""The history window: sprite records, voice transcripts and markdown tables."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from caches.layers.markdown_table import cache_markdown_table
from caches.layers.voice_transcript import TranscriptSource, cache_voice_transcript
from caches.registry import registry
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline import Outcome
from tomori.bot.simulator.event_payloads import message_payload
from tomori.bot.simulator.payloads import member_payload, user_payload
from tomori.domain import models as m

VOICE_FLAG = 1 << 13


@sync_to_async
def record_sprite_message(server_disc_id: int, message_id: int, channel: int) -> None:
    persona = m.Persona.objects.get(server__server_disc_id=server_disc_id, is_main=True)
    m.PersonaSpriteMessage.objects.create(
        message_disc_id=message_id,
        persona=persona,
        sprite_name="happy",
        channel_disc_id=channel,
    )


def attachment(message_id: int, filename: str, content_type: str) -> dict[str, Any]:
    return {
        "id": str(message_id),
        "filename": filename,
        "size": 1024,
        "url": f"https://cdn.example.invalid/{filename}",
        "proxy_url": f"https://media.example.invalid/{filename}",
        "content_type": content_type,
    }


async def post(bot: Bot, guild_id: int, payload: dict[str, Any]) -> None:
    target = bot.pipeline.counters.processed + 1
    await bot.sim.dispatch(guild_id, "MESSAGE_CREATE", payload)
    await bot.pipeline.wait_processed(target, timeout=10)


async def post_webhook_message(bot: Bot, guild_id: int, channel: int) -> int:
    message_id = bot.sim.ids.next()
    await record_sprite_message(guild_id, message_id, channel)
    author = {
        "id": str(bot.sim.ids.next()),
        "username": "Tomori",
        "discriminator": "0000",
        "avatar": None,
        "bot": True,
    }
    payload = message_payload(
        message_id=message_id,
        channel_id=channel,
        author=author,
        content="*waves*",
        guild_id=guild_id,
        webhook_id=int(author["id"]),
    )
    await post(bot, guild_id, payload)
    return message_id


async def post_with_file(
    bot: Bot, guild_id: int, user: int, channel: int, file: tuple[str, str], flags: int
) -> int:
    member = bot.sim.world.guilds[guild_id].members[user]
    message_id = bot.sim.ids.next()
    payload = message_payload(
        message_id=message_id,
        channel_id=channel,
        author=user_payload(member.user),
        content="",
        guild_id=guild_id,
        member=member_payload(member, with_user=False),
    )
    payload["attachments"] = [attachment(bot.sim.ids.next(), *file)]
    payload["flags"] = flags
    await post(bot, guild_id, payload)
    return message_id


async def test_history_window_finds_sprite_records_transcripts_and_tables(
    bot: Bot,
) -> None:
    guild = busiest_guild(bot.sim.world)
    channel = text_channel(bot.sim.world, guild)
    user = await allowed_member(bot.sim.world, guild)
    sprite_message = await post_webhook_message(bot, guild, channel)
    voice = await post_with_file(
        bot, guild, user, channel, ("voice-message.ogg", "audio/ogg"), VOICE_FLAG
    )
    cache_voice_transcript(voice, "see you at eight", source=TranscriptSource.STT)
    table = await post_with_file(
        bot, guild, user, channel, ("table.png", "image/png"), 0
    )
    cache_markdown_table(table, "| a | b |\n|---|---|\n| 1 | 2 |")

    turn = await bot.ask(guild, user, channel, "what did we say?")

    assert turn is not None and turn.outcome is Outcome.OK
    assert [r.message_disc_id for r in turn.sprite_records] == [sprite_message]
    assert turn.sprite_records[0].sprite_name == "happy"
    assert (turn.transcripts_found, turn.tables_found) == (1, 1)
    assert turn.history_size >= 3


async def test_sprite_records_are_primed_once_then_read_from_the_cache(
    bot: Bot,
) -> None:
    guild = busiest_guild(bot.sim.world)
    channel = text_channel(bot.sim.world, guild)
    user = await allowed_member(bot.sim.world, guild)
    await post_webhook_message(bot, guild, channel)
    await bot.ask(guild, user, channel)
    loads = registry.stats()["persona_sprite_message"]
    before = (loads["hits"], loads["size"])

    turn = await bot.ask(guild, user, channel)

    stats = registry.stats()["persona_sprite_message"]
    assert turn is not None and len(turn.sprite_records) == 1
    assert stats["hits"] > before[0]
    assert stats["size"] == before[1]  # nothing new was primed


async def test_a_deleted_message_leaves_the_history_window(bot: Bot) -> None:
    guild = busiest_guild(bot.sim.world)
    channel = text_channel(bot.sim.world, guild)
    user = await allowed_member(bot.sim.world, guild)
    await bot.speak(guild, user, channel, "one")
    second = await bot.ask(guild, user, channel, "two")
    third = await bot.ask(guild, user, channel, "three")
    assert second is not None and third is not None
    assert third.history_size == second.history_size + 1 < 10

    await bot.sim.dispatch(
        guild,
        "MESSAGE_DELETE",
        {
            "id": str(second.message_id),
            "channel_id": str(channel),
            "guild_id": str(guild),
        },
    )
    fourth = await bot.ask(guild, user, channel, "four")

    # "two" is gone (as from discord.py's cache), "three" came in
    assert fourth is not None and fourth.history_size == third.history_size
    cached = {m.id for m in bot.client._connection._messages}
    assert second.message_id not in cached
    window = bot.pipeline.history.window(bot.client._connection._messages[-1])
    assert second.message_id not in {m.id for m in window}
