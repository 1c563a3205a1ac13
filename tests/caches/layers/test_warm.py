"""The warm-up before the gateway (`caches.warm`): what each layer's own loader would store.

Every layer declaring `warm` is warmed for a few servers holding every kind
of row, its maps are read, then emptied and filled again by the layer's own
read path for the same keys: the two must be equal, map by map. Then the
bounds: the deadline, a failing database, each map's cap, the shards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import OperationalError
from django.test import override_settings
from django.utils import timezone

from caches import warm
from caches.layers import (
    channel_llm,
    channel_prompt,
    channel_whitelist,
    emoji_sticker,
    guild_mcp_config,
    novelai_subscription,
    persona_sprite,
    personal_spotlight,
    st_preset,
    tomori_state,
)
from caches.registry import registry
from caches.warm import warm_guilds, warmed_layers
from tomori.domain import models as m
from tomori.domain.repositories import servers as servers_repo

pytestmark = pytest.mark.django_db

#: A channel no server has an override or a whitelisting for.
QUIET = 999


def _server(disc: int, **fields: Any) -> m.Server:
    server = m.Server.objects.create(server_disc_id=disc, **fields)
    m.ServerModelConfig.objects.create(server=server, api_key="k", temperature=0.5)
    main = m.Persona.objects.create(server=server, name="main", is_main=True)
    alter = m.Persona.objects.create(server=server, name="alter", position=1)
    m.PersonaSprite.objects.create(persona=main, name="wave", image_url="http://x/1")
    m.PersonaSprite.objects.create(
        persona=main, name="smile", image_url="http://x/2", position=1
    )
    listed = m.WhitelistedChannel.objects.create(
        server=server, channel_disc_id=10, cooldown_type="user", cooldown_seconds=9
    )
    listed.personas.add(alter)
    m.WhitelistedRole.objects.create(server=server, role_disc_id=5)
    llm = m.Llm.objects.create(provider="openrouter", codename=f"model-{disc}")
    m.ChannelLlmOverride.objects.create(server=server, channel_disc_id=11, llm=llm)
    m.ChannelPromptOverride.objects.create(
        server=server, channel_disc_id=12, prompt="be brief", mode="replace"
    )
    user = m.User.objects.create(user_disc_id=disc + 1, username=f"u{disc}")
    m.PersonalSpotlight.objects.create(
        server=server,
        user=user,
        channel_disc_id=13,
        persona=alter,
        expires_at=timezone.now() + dt.timedelta(days=1),
    )
    preset = m.StPreset.objects.create(server=server, name="st", is_active=True)
    m.StPresetNode.objects.create(preset=preset, content="one", position=0)
    m.StPresetNode.objects.create(preset=preset, content="two", position=1)
    m.GuildMcpServerConfig.objects.create(server=server, name="b", url="http://b")
    m.GuildMcpServerConfig.objects.create(server=server, name="a", url="http://a")
    m.NovelAiSubscription.objects.create(server=server, tier="opus", context_limit=8)
    for i, kind in enumerate(("emoji", "emoji", "sticker")):
        m.ServerExpression.objects.create(
            server=server, kind=kind, expression_disc_id=disc * 10 + i, name=f"e{i}"
        )
    return server


@pytest.fixture
def servers() -> list[m.Server]:
    base = 3 * 10**16
    full = _server(base + 1)
    no_stickers = _server(base + 2, sticker_usage_enabled=False)
    bare = m.Server.objects.create(server_disc_id=base + 3)  # no persona: no state
    return [full, no_stickers, bare]


def _warm(timeout: float = 30.0, **kw: Any) -> Any:
    # async_to_sync: the layers' database calls come back to this thread and
    # its transaction (the rows above are not committed).
    return async_to_sync(warm_guilds)(
        shard_ids=None, shard_count=None, timeout=timeout, **kw
    )


def _held() -> dict[str, dict[str, dict[Any, Any]]]:
    """Return what every warmed layer's maps hold now, by layer and label."""
    return {
        layer.name: {
            label: dict(cache.items())
            for label, cache in registry.get(layer.name).maps().items()  # type: ignore[attr-defined]
        }
        for layer in warmed_layers()
    }


def _flags(server_id: int) -> dict[str, bool]:
    server = m.Server.objects.get(pk=server_id)
    return {
        "emoji_enabled": server.emoji_usage_enabled,
        "sticker_enabled": server.sticker_usage_enabled,
    }


async def _expressions(server_id: int) -> Any:
    """Read a server's expressions as a turn does: with its state's flags."""
    flags = await sync_to_async(_flags)(server_id)
    return await emoji_sticker.load_emoji_sticker_cache(server_id, **flags)


#: Each warmed layer's own read of one key of one of its maps (by label).
LOADERS: dict[str, Callable[[str, Any], Awaitable[Any]]] = {
    tomori_state.NAME: lambda label, key: tomori_state.get_cached_tomori_state(key),
    channel_whitelist.NAME: lambda label, key: (
        channel_whitelist.get_cached_whitelist_status(key, QUIET, role_ids=[])
    ),
    channel_llm.NAME: lambda label, key: channel_llm.get_cached_channel_llm(key, QUIET),
    channel_prompt.NAME: lambda label, key: channel_prompt.get_cached_channel_prompt(
        key, QUIET
    ),
    personal_spotlight.NAME: lambda label, key: (
        personal_spotlight.get_cached_personal_spotlight_status(key, 0, QUIET)
    ),
    emoji_sticker.NAME: lambda label, key: _expressions(key),
    guild_mcp_config.NAME: lambda label, key: (
        guild_mcp_config.get_cached_guild_mcp_configs(key)
    ),
    st_preset.NAME: lambda label, key: st_preset.get_cached_st_preset(key),
    novelai_subscription.NAME: lambda label, key: (
        novelai_subscription.get_cached_novelai_subscription(key)
    ),
    persona_sprite.NAME: lambda label, key: persona_sprite.get_cached_persona_sprites(
        key
    ),
}


def test_every_warmed_layer_is_compared() -> None:
    assert {layer.name for layer in warmed_layers()} == set(LOADERS)


def test_a_warmed_entry_is_what_the_layers_own_loader_stores(servers) -> None:
    report = _warm()
    assert not report.stopped and report.guilds == 3
    warmed = _held()
    for name, maps in warmed.items():
        assert any(maps.values()), f"{name}: the warm-up stored nothing"

    registry.clear_all()

    async def load_each() -> None:
        for name, maps in warmed.items():
            for label, entries in maps.items():
                for key in entries:
                    await LOADERS[name](label, key)

    async_to_sync(load_each)()
    loaded = _held()
    for name, maps in warmed.items():
        for label, entries in maps.items():
            if entries:  # a map the warm-up filled: the loaders fill it alike
                assert loaded[name][label] == entries, f"{name} {label}"
    # Spot checks that the rows were there to be compared.
    assert len(warmed["tomori_state"]["primary"]) == 2  # the bare server: none
    state = warmed["tomori_state"]["last_good"]
    assert set(state) == set(warmed["tomori_state"]["primary"])
    assert warmed["channel_llm"]["gate"][servers[0].pk] == frozenset({11})


def test_the_warm_up_stops_at_its_deadline_and_keeps_what_it_stored(
    servers, monkeypatch
) -> None:
    async def slow(batch: Any) -> int:
        await asyncio.sleep(30)
        return 0

    layers = [
        dataclasses.replace(layer, warm=slow)
        if layer.name == channel_prompt.NAME
        else layer
        for layer in warmed_layers()
    ]
    monkeypatch.setattr(warm, "warmed_layers", lambda: layers)
    report = _warm(timeout=0.5)
    assert "WORKER_WARM_TIMEOUT_SECONDS=0.5" in report.stopped
    assert report.entries["tomori_state"] == 2  # warmed before the slow layer
    assert registry.get("tomori_state").peek(servers[0].server_disc_id) is not None  # type: ignore[attr-defined]
    assert "the rest loads on first use" in report.line()


def test_a_failing_database_leaves_the_start_cold(servers, monkeypatch) -> None:
    def down(*_args: Any) -> Any:
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(servers_repo, "shard_servers", down)
    report = _warm()
    assert report.stored == 0 and "OperationalError" in report.stopped
    assert report.line().endswith("the worker starts cold")
    assert all(len(registry.get(layer.name)) == 0 for layer in warmed_layers())


def test_the_warm_up_stays_within_each_maps_cap(servers) -> None:
    with override_settings(
        TOMORI_STATE_CACHE_MAX_ENTRIES=1, CHANNEL_GATE_MAX_ENTRIES=2
    ):
        report = _warm(batch_size=1)
        assert report.entries["tomori_state"] == 1
        assert report.entries["channel_llm"] == 2
        assert len(registry.get("channel_whitelist").maps()["gate"]) == 2  # type: ignore[attr-defined]
        assert registry.stats()["tomori_state"]["evictions"] == 0


def test_only_the_shards_guilds_are_listed(db) -> None:  # type: ignore[no-untyped-def]
    on = {0: [], 1: []}  # type: dict[int, list[int]]
    for i in range(1, 9):
        disc = (10**6 + i) << 22  # shard (disc >> 22) % 2
        m.Server.objects.create(server_disc_id=disc)
        on[(disc >> 22) % 2].append(disc)
    listed = servers_repo.shard_servers([1], 2)
    assert sorted(disc for _, disc in listed) == sorted(on[1])
    assert len(servers_repo.shard_servers(None, None)) == 8


# ------------------------------------------------------------ refresh-ahead


def _refresh(due: dict[str, tuple[int, int]]) -> Any:
    return async_to_sync(warm.refresh_guilds)(due, shard_ids=None, shard_count=None)


def _every_layer_whole() -> dict[str, tuple[int, int]]:
    return {layer.name: (0, 1) for layer in warmed_layers()}


def test_a_refresh_reloads_what_each_layer_holds_and_adds_nothing(servers) -> None:
    _warm()
    full, no_stickers = servers[0], servers[1]
    state = registry.get(tomori_state.NAME)
    state.invalidate(no_stickers.server_disc_id)  # not held: a refresh leaves it out
    # No commit in this test, so no invalidation: the held entry is stale.
    m.ServerModelConfig.objects.filter(server=full).update(temperature=0.9)
    assert state.peek(full.server_disc_id).temperature == 0.5  # type: ignore[attr-defined]
    held = _held()

    report = _refresh(_every_layer_whole())
    assert not report.stopped and report.guilds == 3
    assert state.peek(full.server_disc_id).temperature == 0.9  # type: ignore[attr-defined]
    assert state.peek(no_stickers.server_disc_id, None) is None  # type: ignore[attr-defined]
    refreshed = _held()
    for name, maps in held.items():  # the same keys, none added
        for label, entries in maps.items():
            assert set(refreshed[name][label]) == set(entries), f"{name} {label}"
    assert report.entries["tomori_state"] == 1
    stats = registry.stats()["tomori_state"]
    assert stats["refreshes"] >= 1 and stats["evictions"] == 0


def test_a_refresh_takes_its_slice_of_the_guilds_and_its_layers_only(servers) -> None:
    _warm()
    for server in servers[:2]:
        m.ServerModelConfig.objects.filter(server=server).update(temperature=0.9)
    # One slice per server, in shard_servers' order: the first server's alone.
    order = [disc for _, disc in servers_repo.shard_servers(None, None)]
    first, second = (order.index(server.server_disc_id) for server in servers[:2])
    report = _refresh({tomori_state.NAME: (first, len(order))})
    assert set(report.entries) == {tomori_state.NAME}
    assert report.entries[tomori_state.NAME] == 1
    state = registry.get(tomori_state.NAME)
    assert state.peek(order[first]).temperature == 0.9  # type: ignore[attr-defined]
    assert state.peek(order[second]).temperature == 0.5  # type: ignore[attr-defined]
    prompt = registry.get(channel_prompt.NAME).stats()  # type: ignore[attr-defined]
    assert prompt["refreshes"] == 0


def test_a_failing_database_stops_a_refresh_and_keeps_what_is_held(
    servers, monkeypatch
) -> None:
    _warm()

    def down(*_args: Any) -> Any:
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(servers_repo, "shard_servers", down)
    report = _refresh(_every_layer_whole())
    assert "OperationalError" in report.stopped and report.stored == 0
    assert registry.get(tomori_state.NAME).peek(servers[0].server_disc_id) is not None  # type: ignore[attr-defined]


def test_each_slice_comes_round_once_a_period_of_half_the_ttl_a_turn_reads(db) -> None:  # type: ignore[no-untyped-def]
    schedule = warm.RefreshSchedule.for_layers(warmed_layers(), check_seconds=15)
    # tomori_state's error memory (60 s) and last good values are not read fresh.
    assert schedule.periods[tomori_state.NAME] == 300.0
    assert schedule.periods[channel_whitelist.NAME] == 150.0
    assert schedule.slices(tomori_state.NAME) == 20
    assert schedule.slices(channel_whitelist.NAME) == 10
    assert schedule.tick() == {}  # nothing counts before its warm-up
    schedule.start()
    seen = [schedule.tick()[channel_whitelist.NAME] for _ in range(21)]
    assert seen[:10] == [(k, 10) for k in range(10)]  # every slice within a period
    assert seen[10:20] == seen[:10] and seen[20] == (0, 10)  # then round again
    schedule.add(warm.USERS, 900.0)
    assert warm.USERS not in schedule.tick()  # counts from its own start
    schedule.start([warm.USERS])
    assert schedule.tick()[warm.USERS] == (0, 60)
    short = warm.RefreshSchedule({"fast": 5.0}, check_seconds=15)
    short.start()
    assert [short.tick()["fast"] for _ in range(2)] == [(0, 1), (0, 1)]


def test_the_workers_job_refreshes_every_slice_within_a_period(
    servers, make_user
) -> None:  # type: ignore[no-untyped-def]
    from caches.layers import user as user_layer
    from tomori.bot.worker import BotWorker, WorkerOptions

    _warm()
    row = make_user(username="before")
    async_to_sync(user_layer.warm_users)([row.user_disc_id], limit=10)
    worker = BotWorker(WorkerOptions(worker_id="w-refresh"))
    worker.refresh = warm.RefreshSchedule.for_layers(warmed_layers(), check_seconds=15)
    worker.refresh.add(warm.USERS, user_layer.user_ttl() / 2)
    worker.refresh.start()
    m.ServerModelConfig.objects.filter(server=servers[0]).update(temperature=0.9)
    m.User.objects.filter(pk=row.id).update(username="after")
    state = registry.get(tomori_state.NAME)

    def temperature() -> float:
        return state.peek(servers[0].server_disc_id).temperature  # type: ignore[attr-defined, no-any-return]

    def username() -> str:
        return user_layer._layer.cache.peek(row.user_disc_id).username  # type: ignore[no-any-return]

    checks = 0

    def check() -> None:
        nonlocal checks
        async_to_sync(worker._refresh_caches)()
        checks += 1

    assert (temperature(), username()) == (0.5, "before")  # stale: no commit here
    # The users' period (900 s) is 60 checks; a row's slice is its place
    # among the keys held at the period's start, modulo 60.
    assert worker.refresh.slices(warm.USERS) == 60
    place = user_layer._layer.cache.keys().index(row.user_disc_id)
    for _ in range(place % 60):
        check()
    assert username() == "before"
    check()
    assert username() == "after"
    while checks < 20:  # one period of tomori_state (300 s in 15 s checks)
        check()
    assert temperature() == 0.9
