"""Discord events drop the cache entries of what they changed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from caches.core import MISSING
from caches.layers.webhook import WebhookHandle, persona_webhook_key, webhook_cache
from caches.registry import registry
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline import Outcome, ResolvedTurn
from tomori.domain.crypto import SecretToken


def cached(name: str, key: Any) -> bool:
    return registry.get(name).peek(key, MISSING) is not MISSING


def whitelist_keys_of(guild_id: int, channel_id: int | None = None) -> list[Any]:
    """Return the whitelist keys of a guild (or of one channel of it)."""
    cache: Any = registry.get("channel_whitelist")
    keys = cache.keys()  # a snapshot list of the live keys (a server's rows: an int)
    return [
        k
        for k in keys
        if isinstance(k, tuple) and k[0] == guild_id and channel_id in (None, k[1])
    ]


def decisions() -> Any:
    """Return the whitelist's decision map (the layer's main map)."""
    return registry.get("channel_whitelist").maps()["primary"]


async def warm_turn(bot: Bot, *, channel: int | None = None) -> ResolvedTurn:
    guild = busiest_guild(bot.sim.world)
    user = await allowed_member(bot.sim.world, guild)
    turn = await bot.ask(guild, user, channel or text_channel(bot.sim.world, guild))
    assert turn is not None and turn.outcome is Outcome.OK
    return turn


async def test_emojis_update_drops_the_servers_emoji_sticker_entry(bot: Bot) -> None:
    turn = await warm_turn(bot)
    assert cached("emoji_sticker", turn.server_id)

    await bot.sim.emojis_update(turn.server_disc_id)
    await bot.client.wait_for_count("invalidate_expressions", 1, timeout=10)

    assert not cached("emoji_sticker", turn.server_id)


async def test_emojis_update_finds_the_server_id_without_a_cached_state(
    bot: Bot,
) -> None:
    turn = await warm_turn(bot)
    registry.invalidate("tomori_state", turn.server_disc_id)  # no id to peek at

    await bot.sim.emojis_update(turn.server_disc_id)
    await bot.client.wait_for_count("invalidate_expressions", 1, timeout=10)

    assert not cached("emoji_sticker", turn.server_id)


async def test_webhooks_update_drops_the_channels_webhook_entries(bot: Bot) -> None:
    turn = await warm_turn(bot)
    channel = turn.channel_disc_id
    handle = WebhookHandle(bot.sim.ids.next(), channel, SecretToken("token"))
    webhook_cache().set(channel, handle)
    webhook_cache().set(persona_webhook_key(channel, turn.active_persona_id), handle)

    await bot.sim.webhooks_update(turn.server_disc_id, channel)
    await bot.client.wait_for_count("invalidate_webhooks", 1, timeout=10)

    assert not cached("webhook", channel)
    assert not cached("webhook", persona_webhook_key(channel, turn.active_persona_id))


async def test_thread_delete_drops_the_threads_whitelist_llm_and_prompt_entries(
    bot: Bot,
) -> None:
    guild = busiest_guild(bot.sim.world)
    parent = text_channel(bot.sim.world, guild)
    thread = await bot.sim.thread_create(guild, parent, "short-lived")
    turn = await warm_turn(bot, channel=thread)
    assert whitelist_keys_of(guild, thread)
    # The thread has no override: the server's gates answered it.
    assert cached("channel_llm", turn.server_id)
    assert cached("channel_prompt", turn.server_id)
    await warm_turn(bot, channel=parent)
    parent_keys = whitelist_keys_of(guild, parent)

    payload = {
        "id": str(thread),
        "guild_id": str(guild),
        "parent_id": str(parent),
        "type": 11,
    }
    await bot.sim.dispatch(guild, "THREAD_DELETE", payload)
    await bot.client.wait_for_count("invalidate_thread", 1, timeout=10)

    assert whitelist_keys_of(guild, thread) == []
    assert not cached("channel_llm", turn.server_id)  # the gates go with it
    assert not cached("channel_prompt", turn.server_id)
    assert whitelist_keys_of(guild, parent) == parent_keys  # the parent's stay


async def test_role_delete_drops_the_servers_whitelist_entries(bot: Bot) -> None:
    turn = await warm_turn(bot)
    guild = turn.server_disc_id
    role = next(r.id for r in bot.sim.world.guilds[guild].roles if r.id != guild)
    assert whitelist_keys_of(guild)

    await bot.sim.dispatch(
        guild, "GUILD_ROLE_DELETE", {"guild_id": str(guild), "role_id": str(role)}
    )
    await bot.client.wait_for_count("invalidate_role_delete", 1, timeout=10)

    assert whitelist_keys_of(guild) == []


async def test_member_role_change_keeps_whitelist_entries(bot: Bot) -> None:
    turn = await warm_turn(bot)
    guild, user = turn.server_disc_id, turn.user_disc_id
    role = next(r.id for r in bot.sim.world.guilds[guild].roles if r.id != guild)
    before = set(whitelist_keys_of(guild))
    changes = bot.client.counters["member_role_changes"]

    await bot.sim.member_update(guild, user, roles=[])  # caches the member
    await bot.sim.member_update(guild, user, roles=[role])
    # Events run in arrival order: once this turn is done, so are the updates.
    again = await bot.speak(guild, user, turn.channel_disc_id)

    assert bot.client.counters["member_role_changes"] > changes
    assert before <= set(whitelist_keys_of(guild))  # nothing was dropped
    assert again is not None and again.outcome is Outcome.OK


async def test_guild_remove_drops_every_entry_of_the_guild(bot: Bot) -> None:
    turn = await warm_turn(bot)
    guild = turn.server_disc_id

    await bot.sim.dispatch(guild, "GUILD_DELETE", {"id": str(guild)})
    await bot.client.wait_for_count("invalidate_guild", 1, timeout=10)

    assert not cached("tomori_state", guild)
    assert not cached("emoji_sticker", turn.server_id)
    assert not cached("st_preset", turn.server_id)
    assert not cached("channel_prompt", (turn.server_id, turn.channel_disc_id))
    assert whitelist_keys_of(guild) == []


def _steps(coro: Any) -> int:
    """Run `coro` to its end by hand; return how often it gave the loop a turn."""
    turns = 0
    while True:
        try:
            assert coro.send(None) is None  # only sleep(0): no real waits here
        except StopIteration:
            return turns
        turns += 1


def test_a_big_guild_is_dropped_in_turns_and_only_that_guild(monkeypatch) -> None:
    from tomori.bot.pipeline import discord_events

    whitelist = decisions()
    user: Any = registry.get("user")
    big, other = 111, 222
    for i in range(1000):
        whitelist.set((big, 1000 + i % 20, 0, frozenset({i})), object())
    user.set((big, "*"), frozenset({5000}))  # each server's blacklist: one set
    whitelist.set((other, 3000, 0, None), object())
    user.set((other, "*"), frozenset())
    user.set(5000, object())  # a user row: no guild's
    state: Any = registry.get("tomori_state")
    state.primary.set(big, SimpleNamespace(server_id=7))  # its id, known: no query
    monkeypatch.setattr(discord_events, "DRAIN_BUDGET_SECONDS", 0.0)

    turns = _steps(discord_events.guild_removed(big, [1000 + i for i in range(20)]))

    # Every 16 entries the clock is read, and an exhausted budget yields.
    assert turns >= 1000 // 16
    user_keys = user.keys()  # a snapshot list of the live keys
    assert whitelist_keys_of(big) == []
    assert not any(isinstance(k, tuple) and k[0] == big for k in user_keys)
    assert whitelist_keys_of(other) == [(other, 3000, 0, None)]
    assert cached("user", (other, "*")) and cached("user", 5000)


def test_a_role_deletion_drains_the_whitelist_in_turns(monkeypatch) -> None:
    from tomori.bot.pipeline import discord_events

    whitelist = decisions()
    for i in range(100):
        whitelist.set((111, 1000, 0, frozenset({i})), object())
    monkeypatch.setattr(discord_events, "DRAIN_BUDGET_SECONDS", 0.0)

    turns = _steps(discord_events.role_deleted(111))

    assert turns >= 100 // 16 and whitelist_keys_of(111) == []


def test_every_declared_guild_scope_exists_on_its_built_layer() -> None:
    from caches.layers import declared_layers
    from tomori.bot.pipeline.discord_events import _stores_with_scope

    scoped = [(n, x.guild.scope) for n, x in declared_layers().items() if x.guild]
    for name, scope in scoped:
        if scope is not None:
            assert _stores_with_scope(registry.get(name), scope)  # raises if absent
