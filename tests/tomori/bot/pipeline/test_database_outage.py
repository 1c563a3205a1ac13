"""A database outage reads as such: last good state served stale, else db_unavailable.

The layers' database thread reaches PostgreSQL through a TCP proxy the test
makes refuse; the test's own writes take a direct connection, so a change can
be committed (and its invalidation applied) while the bot cannot read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.db import connection

from caches.core import MISSING
from caches.database import run_db
from caches.db_outage import check_database, outage_log
from caches.layers import tomori_state
from caches.layers.short_term_memory import short_term_memory_store
from caches.registry import registry
from tests.support.faults import TcpProxy
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    human_member,
    text_channel,
)
from tomori.bot.pipeline import Outcome
from tomori.bot.pipeline.responder import UNAVAILABLE_TEXT, ReplyingResponder
from tomori.domain import models as m


def _route_through(port: int | None, saved: dict[str, Any]) -> None:
    """Point this thread's connection at `port` (None: back to `saved`)."""
    connection.close()
    if port is None:
        connection.settings_dict = saved
    else:
        connection.settings_dict = {**saved, "HOST": "127.0.0.1", "PORT": str(port)}


@pytest.fixture
async def proxied(bot: Bot, pg_proxy: TcpProxy) -> AsyncIterator[TcpProxy]:
    """Make the layers' database thread read through `pg_proxy` for this test."""
    saved = await run_db(lambda: connection.settings_dict)
    await run_db(_route_through, pg_proxy.port, saved)
    yield pg_proxy
    pg_proxy.forward()
    await run_db(_route_through, None, saved)
    outage_log.success()  # leave no outage open for the next test


def _set_temperature(guild_id: int, temperature: float) -> None:
    """Commit a change over a direct connection (its own thread), then close it."""
    try:
        config = m.ServerModelConfig.objects.get(server__server_disc_id=guild_id)
        config.temperature = temperature
        config.save()  # invalidates tomori_state (only) on commit
    finally:
        connection.close()


def _other_guild(bot: Bot, guild: int) -> int:
    return next(g for g in sorted(bot.sim.world.guilds) if g != guild)


async def test_an_outage_serves_the_last_good_state_past_an_invalidation(
    bot: Bot, proxied: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    world = bot.sim.world
    guild = busiest_guild(world)
    user = await allowed_member(world, guild)
    newcomer = await allowed_member(world, guild, index=1)
    channel = text_channel(world, guild)
    warm = await bot.ask(guild, user, channel)  # an answer: it captures its turn
    assert warm is not None and warm.outcome is Outcome.OK and not warm.db_failures

    before = tomori_state._layer.fresh.peek(guild)

    proxied.refuse()
    await asyncio.to_thread(_set_temperature, guild, 0.25)
    assert tomori_state._layer.fresh.peek(guild) is MISSING  # the invalidation arrived

    during = await bot.ask(guild, user, channel)  # captured; stored once it is back
    assert during is not None and during.outcome is Outcome.OK
    assert (during.stm_user_turns, during.stm_server_turns) == (1, 1)
    assert during.stale_layers == ("tomori_state",)
    assert "tomori_state" in during.db_failures
    assert tomori_state._layer.cache.stale(guild) is before  # served: the last good
    assert registry.stats()["tomori_state"]["stale_entries"] == 1

    # A turn that answers needs the newcomer's own memory, which is not held.
    asks = f"<@{world.bot_user.id}> hello"
    unseen = await bot.speak(guild, newcomer, channel, asks)
    assert unseen is not None and unseen.outcome is Outcome.DB_UNAVAILABLE
    assert "user" in unseen.db_failures
    # One that does not answer reads only the gate (the state served stale).
    quiet = await bot.speak(guild, newcomer, channel)
    assert quiet is not None and quiet.outcome is Outcome.OK
    assert quiet.stale_layers == ("tomori_state",) and quiet.stm_entries_found == 0
    other = _other_guild(bot, guild)  # its state was never cached
    cold = await bot.speak(
        other, human_member(world, other), text_channel(world, other)
    )
    assert cold is not None and cold.outcome is Outcome.DB_UNAVAILABLE
    assert cold.stale_layers == ()

    proxied.forward()
    after = await bot.speak(guild, user, channel)
    assert after is not None and after.outcome is Outcome.OK
    store = short_term_memory_store()
    await asyncio.wait_for(store.flush(), 10)
    assert store.turns_behind() == 0
    rows = await run_db(
        lambda: list(
            m.ShortTermMemoryRecord.objects.filter(
                scope="user", user_disc_id__in=(user, newcomer)
            ).values_list("user_disc_id", "channel_disc_id", "turn_count")
        )
    )
    # The answer during the outage, stored once the database was back; the
    # newcomer's turns captured nothing (one failed, one was quiet).
    assert rows == [(user, channel, 2)]
    assert not after.stale_layers and not after.db_failures
    assert tomori_state._layer.fresh.peek(guild).temperature == 0.25  # the saved value
    assert registry.stats()["tomori_state"]["stale_entries"] == 0

    with caplog.at_level(logging.WARNING, logger="caches.db_outage"):
        await check_database()
    assert not outage_log.active
    assert "database outage ended" in caplog.text


async def test_a_whitelist_failure_ends_the_turn_db_unavailable(
    bot: Bot, proxied: TcpProxy
) -> None:
    world = bot.sim.world
    guild = busiest_guild(world)
    user = await allowed_member(world, guild)
    first, second = text_channel(world, guild), text_channel(world, guild, index=1)
    assert (await bot.speak(guild, user, first)).outcome is Outcome.OK
    # A new key is decided from the server's cached rows: drop them, so the
    # new key must load.
    registry.apply("channel_whitelist", "key", guild)

    proxied.refuse()
    turn = await bot.speak(guild, user, second)  # a new whitelist key: a load

    assert turn is not None and turn.outcome is Outcome.DB_UNAVAILABLE
    assert turn.db_failures == ("channel_whitelist",)
    assert bot.pipeline.counters.errors == 0  # an outage is no pipeline error


async def test_a_mention_during_an_outage_is_answered_with_an_apology(
    bot: Bot, proxied: TcpProxy
) -> None:
    responder = ReplyingResponder(bot.client)
    bot.pipeline.responder = responder
    world = bot.sim.world
    guild = busiest_guild(world)  # never cached: its state cannot load
    user = await allowed_member(world, guild)
    target = bot.pipeline.counters.processed + 2  # the mention, then the reply

    proxied.refuse()
    await bot.sim.member_speaks(
        guild, user, text_channel(world, guild), f"<@{bot.sim.bot_user_id}> hi"
    )
    await bot.pipeline.wait_processed(target, timeout=10)

    assert responder.by_outcome[Outcome.DB_UNAVAILABLE] == 1
    assert bot.sim.sent_messages[-1].content == UNAVAILABLE_TEXT
