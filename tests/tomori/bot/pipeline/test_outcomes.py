"""Which turns stop early, and why: not configured, blacklisted, not whitelisted, DMs."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    blacklisted_users,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline import Outcome
from tomori.bot.pipeline.responder import ReplyingResponder
from tomori.bot.simulator.event_payloads import message_payload
from tomori.bot.simulator.payloads import user_payload
from tomori.domain import models as m


@sync_to_async
def whitelisted_server() -> tuple[int, list[int]]:
    server = m.Server.objects.filter(channel_whitelist_enabled=True).first()
    assert server is not None
    channels = m.WhitelistedChannel.objects.filter(server=server)
    return server.server_disc_id, sorted(c.channel_disc_id for c in channels)


@sync_to_async
def drop_api_key(guild_id: int) -> None:
    config = m.ServerModelConfig.objects.get(server__server_disc_id=guild_id)
    config.api_key = None
    config.save()  # invalidates tomori_state on commit


@sync_to_async
def whitelist_role(guild_id: int, role_id: int) -> None:
    server = m.Server.objects.get(server_disc_id=guild_id)
    m.WhitelistedRole.objects.create(server=server, role_disc_id=role_id)


async def test_blacklisted_user_gets_a_blacklisted_turn(bot: Bot) -> None:
    for guild_id in bot.sim.world.guilds:
        barred = sorted(await blacklisted_users(guild_id))
        if barred:
            break
    turn = await bot.speak(guild_id, barred[0], text_channel(bot.sim.world, guild_id))

    assert turn is not None and turn.outcome is Outcome.BLACKLISTED
    assert turn.persona_names == ()  # stopped before the personas


async def test_server_without_api_key_is_not_configured(bot: Bot) -> None:
    guild = busiest_guild(bot.sim.world)
    user = await allowed_member(bot.sim.world, guild)
    channel = text_channel(bot.sim.world, guild)
    assert (await bot.speak(guild, user, channel)).outcome is Outcome.OK

    await drop_api_key(guild)
    turn = await bot.speak(guild, user, channel)

    assert turn is not None and turn.outcome is Outcome.NOT_CONFIGURED


async def test_whitelist_allows_listed_channels_and_threads_of_them(bot: Bot) -> None:
    guild, listed = await whitelisted_server()
    world = bot.sim.world
    user = await allowed_member(world, guild)
    texts = [c.id for c in world.guilds[guild].channels if c.type == 0]
    unlisted = next(c for c in texts if c not in listed)
    thread = await bot.sim.thread_create(guild, listed[-1], "follow-up")

    allowed = await bot.speak(guild, user, listed[-1])
    blocked = await bot.speak(guild, user, unlisted)
    in_thread = await bot.speak(guild, user, thread)

    assert allowed.outcome is Outcome.OK and not allowed.whitelist_inherited
    assert blocked.outcome is Outcome.NOT_WHITELISTED
    assert in_thread.outcome is Outcome.OK and in_thread.whitelist_inherited
    assert in_thread.parent_channel_disc_id == listed[-1]


async def test_role_whitelist_follows_the_members_roles_without_invalidation(
    bot: Bot,
) -> None:
    guild = busiest_guild(bot.sim.world)
    world = bot.sim.world
    user = await allowed_member(world, guild)
    channel = text_channel(world, guild)
    role = next(r.id for r in world.guilds[guild].roles if r.id != guild)
    await bot.sim.member_update(guild, user, roles=[])
    await whitelist_role(guild, role)

    without = await bot.speak(guild, user, channel)
    await bot.sim.member_update(guild, user, roles=[role])
    # Events run in arrival order: the update is applied before this turn.
    with_role = await bot.speak(guild, user, channel)

    assert without.outcome is Outcome.NOT_WHITELISTED
    assert with_role.outcome is Outcome.OK


async def test_direct_message_resolves_user_state_without_a_server(bot: Bot) -> None:
    guild = busiest_guild(bot.sim.world)
    user = bot.sim.world.guilds[guild].members[
        await allowed_member(bot.sim.world, guild)
    ]
    message_id = bot.sim.ids.next()
    payload = message_payload(
        message_id=message_id,
        channel_id=bot.sim.ids.next(),
        author=user_payload(user.user),
        content="hi, in private",
    )
    target = bot.pipeline.counters.processed + 1
    await bot.sim.dispatch(guild, "MESSAGE_CREATE", payload)  # routed by shard only
    await bot.pipeline.wait_processed(target, timeout=10)

    turn = bot.responder.latest(message_id=message_id)
    assert turn is not None and turn.outcome is Outcome.DM
    assert turn.server_disc_id is None and turn.user_id is not None


async def test_replying_responder_answers_mentions_and_skips_its_own_echo(
    bot: Bot,
) -> None:
    responder = ReplyingResponder(bot.client)
    bot.pipeline.responder = responder
    guild = busiest_guild(bot.sim.world)
    user = await allowed_member(bot.sim.world, guild)
    channel = text_channel(bot.sim.world, guild)
    mention = f"<@{bot.sim.bot_user_id}> how are you?"
    target = bot.pipeline.counters.processed + 2  # the mention, then the echo

    await bot.sim.member_speaks(guild, user, channel, mention)
    await bot.pipeline.wait_processed(target, timeout=10)

    assert responder.replies == 1
    assert bot.pipeline.counters.skipped_own == 1
    sent = bot.sim.sent_messages[-1]
    assert sent.channel_id == channel and "Tomori" in sent.content
