"""A member dropped by the member sweeper is handled when they speak again."""

from __future__ import annotations

from caches.discord_caches import sweep_members
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline import Outcome


async def test_swept_member_who_speaks_again_gets_a_full_turn(bot: Bot) -> None:
    world = bot.sim.world
    guild_id = busiest_guild(world)
    user = await allowed_member(world, guild_id)
    channel = text_channel(world, guild_id)
    await bot.sim.member_update(guild_id, user, roles=[])  # make sure it is cached
    # Turns that answer: they read the user's own memory (the others defer it).
    asks = f"<@{world.bot_user.id}> hello"
    first = await bot.speak(guild_id, user, channel, asks)
    guild = bot.client.get_guild(guild_id)
    assert guild.get_member(user) is not None

    swept = sweep_members(bot.client)
    again = await bot.speak(guild_id, user, channel, asks)

    assert swept > 0 and guild.get_member(user) is None
    assert first.outcome is again.outcome is Outcome.OK
    assert again.user_id == first.user_id
    assert again.active_persona == first.active_persona
    assert again.stm_user_turns == (first.stm_user_turns or 0) + 1
