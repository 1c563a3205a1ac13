"""Messages: scenario traffic into on_message, and the bot's sends recorded."""

from __future__ import annotations

import io

import discord

from tomori.bot.simulator import SimulatedDiscord

from .conftest import EVENT_TIMEOUT, StartClient, full_intents


def _human_in(sim: SimulatedDiscord, guild_id: int) -> int:
    guild = sim.world.guild(guild_id)
    return next(uid for uid, m in guild.members.items() if not m.user.bot)


def _first_text_channel(sim: SimulatedDiscord, guild_id: int) -> int:
    return next(c.id for c in sim.world.guild(guild_id).channels if c.type == 0)


async def test_scenario_messages_arrive_with_member_authors(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    assert await sim.send_messages(300) == 300
    messages = await client.wait_for_messages(300)
    from_members = [m for m in messages if m.webhook_id is None]
    assert all(isinstance(m.author, discord.Member) for m in from_members)
    assert any(m.author.bot for m in from_members)
    assert any(m.webhook_id is not None for m in messages)
    assert any(isinstance(m.channel, discord.Thread) for m in messages)
    assert any(client.user in m.mentions for m in messages)
    assert sim.stats.messages_dispatched == 300


async def test_member_speaks_arrives_in_the_right_channel(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = next(iter(sim.world.guilds))
    user_id = _human_in(sim, guild_id)
    channel_id = _first_text_channel(sim, guild_id)
    content = f"<@{sim.bot_user_id}> hello"
    message_id = await sim.member_speaks(guild_id, user_id, channel_id, content)
    [message] = await client.wait_for_messages(1)
    assert (message.id, message.channel.id, message.author.id) == (
        message_id,
        channel_id,
        user_id,
    )
    assert message.content == content
    assert message.mentions == [message.guild.me]


async def test_content_is_blank_without_the_message_content_intent(
    sim: SimulatedDiscord, start_client: StartClient
):
    intents = full_intents()
    intents.message_content = False
    client = await start_client(intents=intents)
    guild_id = next(iter(sim.world.guilds))
    user_id = _human_in(sim, guild_id)
    channel_id = _first_text_channel(sim, guild_id)
    await sim.member_speaks(guild_id, user_id, channel_id, "secret")
    await sim.member_speaks(guild_id, user_id, channel_id, f"<@{sim.bot_user_id}> hi")
    first, second = await client.wait_for_messages(2)
    assert first.content == ""
    assert second.content.endswith("hi")


async def test_channel_send_is_recorded_and_echoed(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    channel = client.get_channel(_first_text_channel(sim, next(iter(sim.world.guilds))))
    sent = await channel.send("ohayo")
    [recorded] = sim.sent_messages
    assert (recorded.via, recorded.message_id, recorded.channel_id) == (
        "rest",
        sent.id,
        channel.id,
    )
    assert recorded.content == "ohayo"
    [echo] = await client.wait_for_messages(1)
    assert echo.id == sent.id and echo.author == channel.guild.me
    assert sim.stats.rest_messages == 1


async def test_webhooks_are_created_listed_executed_and_deleted(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    channel = client.get_channel(_first_text_channel(sim, next(iter(sim.world.guilds))))
    updated = client.wait_for("webhooks_update", timeout=EVENT_TIMEOUT)
    webhook = await channel.create_webhook(name="Tomori Persona")
    assert (await updated).id == channel.id
    assert webhook.id in {w.id for w in await channel.webhooks()}
    message = await webhook.send("as a persona", username="Aoi", wait=True)
    [recorded] = sim.sent_messages
    assert (recorded.via, recorded.webhook_id) == ("webhook", webhook.id)
    assert message.webhook_id == webhook.id and message.author.name == "Aoi"
    await webhook.delete()
    assert webhook.id not in sim.world.webhooks
    assert sim.stats.webhook_executions == 1


async def test_run_traffic_paces_messages_over_the_duration(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    sent = await sim.run_traffic(rate_per_second=400, duration=0.05)
    assert 1 <= sent <= 40
    await client.wait_for_messages(sent)


async def test_channel_send_with_a_file_is_recorded(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    channel = client.get_channel(_first_text_channel(sim, next(iter(sim.world.guilds))))
    await channel.send("see attached", file=discord.File(io.BytesIO(b"hi"), "note.txt"))
    [recorded] = sim.sent_messages
    assert recorded.content == "see attached"
    assert recorded.payload["attachments"][0]["filename"] == "note.txt"
