"""Presence, voice, member, emoji and thread events change discord.py's cache."""

from __future__ import annotations

import discord

from tomori.bot.simulator import SimulatedDiscord
from tomori.bot.simulator.world import TEXT_CHANNEL, VOICE_CHANNEL

from .conftest import EVENT_TIMEOUT, StartClient


def _small_guild(sim: SimulatedDiscord) -> int:
    return min(sim.world.guilds.values(), key=lambda g: g.member_count).id


def _offline_human(sim: SimulatedDiscord, guild_id: int) -> int:
    members = sim.world.guild(guild_id).members.values()
    return next(m.user.id for m in members if not m.user.bot and not m.user.online)


async def test_presence_update_changes_status_and_activity(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = _small_guild(sim)
    user_id = _offline_human(sim, guild_id)
    changed = client.wait_for(
        "presence_update", check=lambda b, a: a.id == user_id, timeout=EVENT_TIMEOUT
    )
    game = {"type": 0, "name": "Osu!"}
    await sim.presence_update(
        user_id, status="dnd", activities=[game], guild_id=guild_id
    )
    before, after = await changed
    assert before.status is discord.Status.offline
    assert after.status is discord.Status.dnd
    assert after.activity.name == "Osu!"
    assert client.get_guild(guild_id).get_member(user_id).status is discord.Status.dnd


async def test_voice_join_and_leave_update_voice_states(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = _small_guild(sim)
    user_id = _offline_human(sim, guild_id)
    room = next(
        c.id for c in sim.world.guild(guild_id).channels if c.type == VOICE_CHANNEL
    )
    joined = client.wait_for("voice_state_update", timeout=EVENT_TIMEOUT)
    await sim.voice_join(guild_id, user_id, room)
    member, _, after = await joined
    assert member.id == user_id and after.channel.id == room
    assert member.voice.channel.id == room
    left = client.wait_for("voice_state_update", timeout=EVENT_TIMEOUT)
    await sim.voice_leave(guild_id, user_id)
    member, _, after = await left
    assert after.channel is None
    assert user_id not in client.get_guild(guild_id)._voice_states


async def test_member_update_changes_nick_and_roles(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = _small_guild(sim)
    user_id = _offline_human(sim, guild_id)
    role_id = sim.world.guild(guild_id).roles[-1].id
    updated = client.wait_for("member_update", timeout=EVENT_TIMEOUT)
    await sim.member_update(guild_id, user_id, nick="Senpai", roles=[role_id])
    _, after = await updated
    assert after.nick == "Senpai"
    assert [r.id for r in after.roles if not r.is_default()] == [role_id]


async def test_emojis_update_replaces_the_guild_emojis(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = _small_guild(sim)
    before_count = len(client.get_guild(guild_id).emojis)
    updated = client.wait_for("guild_emojis_update", timeout=EVENT_TIMEOUT)
    await sim.emojis_update(guild_id)  # Adds one emoji.
    _, _, after = await updated
    assert len(after) == before_count + 1
    updated = client.wait_for("guild_emojis_update", timeout=EVENT_TIMEOUT)
    await sim.emojis_update(guild_id, [sim.make_emoji("only_one")])
    _, _, after = await updated
    assert [e.name for e in after] == ["only_one"]
    assert [e.name for e in client.get_guild(guild_id).emojis] == ["only_one"]


async def test_thread_create_adds_a_thread_that_receives_messages(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = _small_guild(sim)
    parent = next(
        c.id for c in sim.world.guild(guild_id).channels if c.type == TEXT_CHANNEL
    )
    created = client.wait_for("thread_create", timeout=EVENT_TIMEOUT)
    thread_id = await sim.thread_create(guild_id, parent, "spoilers")
    thread = await created
    assert (thread.id, thread.parent_id, thread.name) == (thread_id, parent, "spoilers")
    user_id = _offline_human(sim, guild_id)
    await sim.member_speaks(guild_id, user_id, thread_id, "in the thread")
    [message] = await client.wait_for_messages(1)
    assert message.channel == client.get_guild(guild_id).get_thread(thread_id)


async def test_webhooks_update_reaches_the_client(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = _small_guild(sim)
    channel_id = next(
        c.id for c in sim.world.guild(guild_id).channels if c.type == TEXT_CHANNEL
    )
    updated = client.wait_for("webhooks_update", timeout=EVENT_TIMEOUT)
    assert await sim.webhooks_update(guild_id, channel_id)
    assert (await updated).id == channel_id


async def test_raw_dispatch_sends_any_event(
    sim: SimulatedDiscord, start_client: StartClient
):
    client = await start_client()
    guild_id = _small_guild(sim)
    user = sim.world.guild(guild_id).members[_offline_human(sim, guild_id)].user
    removed = client.wait_for("raw_member_remove", timeout=EVENT_TIMEOUT)
    payload = {
        "guild_id": str(guild_id),
        "user": {
            "id": str(user.id),
            "username": user.username,
            "discriminator": "0",
            "avatar": None,
        },
    }
    assert await sim.dispatch(guild_id, "GUILD_MEMBER_REMOVE", payload)
    assert (await removed).user.id == user.id
