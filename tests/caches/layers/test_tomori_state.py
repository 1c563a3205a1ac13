"""Tomori state layer: personas per server, stale serving and remembered errors."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from django.db import OperationalError

from caches.core import MISSING
from caches.layers import _support, tomori_state
from caches.layers.tomori_state import (
    get_cached_all_personas,
    get_cached_main_persona,
    get_cached_tomori_state,
    tomori_state_database_error,
)
from caches.registry import registry
from tests.caches.layers.fakes import tomori_rows
from tomori.domain import models as m
from tomori.domain.repositories import servers as servers_repo

pytestmark = pytest.mark.django_db

TTL = 10 * 60.0


def test_miss_loads_personas_main_first(run, make_configured_server, make_persona):
    server = make_configured_server()
    make_persona(server, name="Alter B", position=2)
    make_persona(server, name="Alter A", position=1)
    personas = run(get_cached_all_personas, server.server_disc_id)
    assert [p.name for p in personas] == ["Tomori", "Alter A", "Alter B"]
    main = run(get_cached_main_persona, server.server_disc_id)
    assert main is not None and main.is_main and main.name == "Tomori"


def test_state_carries_server_ids_and_flags(run, make_configured_server):
    server = make_configured_server(emoji_usage_enabled=False)
    state = run(get_cached_tomori_state, server.server_disc_id)
    assert state.server_id == server.id
    assert state.server_disc_id == server.server_disc_id
    assert state.configured is True and state.llm_id is not None
    assert state.emoji_usage_enabled is False and state.sticker_usage_enabled is True
    assert state.tool_use_enabled is True and state.channel_whitelist_enabled is False


def test_warm_read_runs_no_query(
    run, make_configured_server, django_assert_num_queries
):
    server = make_configured_server()
    run(get_cached_tomori_state, server.server_disc_id)
    with django_assert_num_queries(0):
        state = run(get_cached_tomori_state, server.server_disc_id)
        assert run(get_cached_main_persona, server.server_disc_id) is state.main_persona


def test_cached_state_is_immutable(run, make_configured_server):
    state = run(get_cached_tomori_state, make_configured_server().server_disc_id)
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.main_persona.name = "changed"  # type: ignore[misc]
    assert isinstance(state.personas, tuple)


def test_unknown_server_is_not_cached(run, count_calls):
    calls = count_calls(servers_repo, "load_tomori_state_rows")
    assert run(get_cached_tomori_state, 1) is None
    assert run(get_cached_all_personas, 1) == ()
    assert calls.calls == 2
    assert len(registry.get("tomori_state")) == 0


def test_server_without_personas_is_not_cached(run, make_server):
    server = make_server()
    state = run(get_cached_tomori_state, server.server_disc_id)
    assert state is not None and state.personas == () and state.main_persona is None
    assert tomori_state._layer.cache.get(server.server_disc_id) is MISSING


def test_server_without_main_persona_is_not_cached(run, make_server, make_persona):
    server = make_server()
    make_persona(server, name="Only an alter")
    assert run(get_cached_main_persona, server.server_disc_id) is None
    assert len(run(get_cached_all_personas, server.server_disc_id)) == 1
    assert tomori_state._layer.cache.get(server.server_disc_id) is MISSING


def test_tool_use_disabled_personas_report_no_tool_support(run, make_configured_server):
    server = make_configured_server(tool_use_enabled=False)
    personas = run(get_cached_all_personas, server.server_disc_id)
    assert personas and all(p.tools_enabled is False for p in personas)


def test_entry_expires_after_ttl(run, make_configured_server, count_calls, clock):
    server = make_configured_server()
    calls = count_calls(servers_repo, "load_tomori_state_rows")
    run(get_cached_tomori_state, server.server_disc_id)
    clock.advance(TTL - 1)
    run(get_cached_tomori_state, server.server_disc_id)
    assert calls.calls == 1
    clock.advance(2)
    run(get_cached_tomori_state, server.server_disc_id)
    assert calls.calls == 2


def test_key_op_drops_the_entry(run, make_configured_server, make_persona):
    server = make_configured_server()
    run(get_cached_tomori_state, server.server_disc_id)
    make_persona(server, name="New alter")
    # The fresh entry only: the last good copy stays for a failed reload.
    assert registry.apply("tomori_state", "key", server.server_disc_id) == 1
    names = [p.name for p in run(get_cached_all_personas, server.server_disc_id)]
    assert "New alter" in names


def test_all_op_clears_every_server(run, make_configured_server):
    for _ in range(3):
        run(get_cached_tomori_state, make_configured_server().server_disc_id)
    assert registry.apply("tomori_state", "all") == 6  # 3 fresh, 3 last good copies


def test_database_error_without_entry_answers_empty_and_is_remembered(run, db_down):
    db_down(servers_repo, "load_tomori_state_rows")
    assert run(get_cached_tomori_state, 55) is None
    assert run(get_cached_all_personas, 55) == ()
    assert (
        len(tomori_state._layer.fresh) == 0
        and tomori_state._layer.cache.stale(55) is MISSING
    )
    error = tomori_state_database_error(55)
    assert error is not None and "OperationalError" in error
    assert tomori_state_database_error(56) is None  # another server: not configured


def test_database_error_serves_the_stale_entry(
    run, make_configured_server, db_down, clock
):
    server = make_configured_server()
    before = run(get_cached_tomori_state, server.server_disc_id)
    clock.advance(TTL + 1)
    db_down(servers_repo, "load_tomori_state_rows")
    assert run(get_cached_tomori_state, server.server_disc_id) is before
    assert tomori_state._layer.cache.get(server.server_disc_id) is MISSING
    assert tomori_state_database_error(server.server_disc_id) is not None


def test_invalidated_entry_reloads_first_and_is_served_stale_if_that_fails(
    run, make_configured_server, monkeypatch
):
    server = make_configured_server()
    before = run(get_cached_tomori_state, server.server_disc_id)
    registry.apply("tomori_state", "key", server.server_disc_id)
    tries = []

    def down(*args, **_k):
        tries.append(args)
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(servers_repo, "load_tomori_state_rows", down)
    assert run(get_cached_tomori_state, server.server_disc_id) is before
    assert run(get_cached_tomori_state, server.server_disc_id) is before
    assert len(tries) == 2  # every read tries the database before serving stale
    assert registry.stats()["tomori_state"]["stale_entries"] == 1


def test_reload_after_an_invalidation_serves_the_change_once_the_database_answers(
    run, make_configured_server, make_persona, monkeypatch
):
    server = make_configured_server()
    run(get_cached_tomori_state, server.server_disc_id)
    registry.apply("tomori_state", "key", server.server_disc_id)
    make_persona(server, name="Saved during the outage")
    real = servers_repo.load_tomori_state_rows

    def down(*_a, **_k):
        raise OperationalError("down")

    monkeypatch.setattr(servers_repo, "load_tomori_state_rows", down)
    stale = run(get_cached_tomori_state, server.server_disc_id)
    assert "Saved during the outage" not in [p.name for p in stale.personas]
    monkeypatch.setattr(servers_repo, "load_tomori_state_rows", real)
    fresh = run(get_cached_tomori_state, server.server_disc_id)
    assert "Saved during the outage" in [p.name for p in fresh.personas]
    assert registry.stats()["tomori_state"]["stale_entries"] == 0


def test_successful_load_the_layer_does_not_cache_drops_the_last_good_copy(
    run, make_server, make_persona, db_down
):
    server = make_server()
    make_persona(server, name="Tomori", is_main=True)
    assert run(get_cached_tomori_state, server.server_disc_id).main_persona
    registry.apply("tomori_state", "key", server.server_disc_id)
    m.Persona.objects.filter(server_id=server.id).delete()  # no personas: DoNotCache
    assert run(get_cached_tomori_state, server.server_disc_id).main_persona is None
    db_down(servers_repo, "load_tomori_state_rows")
    assert run(get_cached_tomori_state, server.server_disc_id) is None


def test_remembered_error_fades_and_clears_on_success(
    run, make_configured_server, monkeypatch, clock
):
    server = make_configured_server()
    real = servers_repo.load_tomori_state_rows

    def down(*_a, **_k):
        raise OperationalError("down")

    monkeypatch.setattr(servers_repo, "load_tomori_state_rows", down)
    run(get_cached_tomori_state, server.server_disc_id)
    clock.advance(tomori_state.ERROR_MEMORY_SECONDS + 1)
    assert tomori_state_database_error(server.server_disc_id) is None
    run(get_cached_tomori_state, server.server_disc_id)
    assert tomori_state_database_error(server.server_disc_id) is not None
    monkeypatch.setattr(servers_repo, "load_tomori_state_rows", real)
    assert run(get_cached_tomori_state, server.server_disc_id) is not None
    assert tomori_state_database_error(server.server_disc_id) is None


def test_concurrent_misses_share_one_load(run, make_configured_server, count_calls):
    server = make_configured_server()
    calls = count_calls(servers_repo, "load_tomori_state_rows")

    async def burst() -> list[object]:
        reads = [get_cached_tomori_state(server.server_disc_id) for _ in range(20)]
        return await asyncio.gather(*reads)

    states = run(burst)
    assert calls.calls == 1
    assert all(state is states[0] for state in states)


async def test_load_overlapping_an_edit_is_not_served_in_a_later_outage(monkeypatch):
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_read(_fn, server_disc_id):  # reads OLD, then lingers
        rows = tomori_rows(server_disc_id, persona="OLD")
        started.set()
        await release.wait()
        return rows

    monkeypatch.setattr(tomori_state, "run_db", slow_read)
    load = asyncio.create_task(get_cached_tomori_state(77))
    await started.wait()
    registry.apply("tomori_state", "key", 77)  # an admin edit lands mid-load
    release.set()
    assert (await load).main_persona.name == "OLD"  # its own waiter still gets it

    async def outage(*_args):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(tomori_state, "run_db", outage)
    assert await get_cached_tomori_state(77) is None  # not the pre-edit OLD


async def test_sizes_count_last_good_copies_and_errors(monkeypatch):
    async def read(_fn, server_disc_id):
        if server_disc_id == 2:
            raise OperationalError("could not connect to server")
        return tomori_rows(server_disc_id)

    monkeypatch.setattr(tomori_state, "run_db", read)
    await get_cached_tomori_state(1)
    await get_cached_tomori_state(2)
    assert registry.sizes()["tomori_state"] == 3
    stats = registry.stats()["tomori_state"]
    assert stats["members"] == {"primary": 1, "last_good": 1, "errors": 1}
    assert stats["size"] == 3 and stats["cap"] == 3 * tomori_state._layer.fresh.maxsize
    assert registry.clear("tomori_state") == 3


async def test_hit_reaches_no_loader_and_counts_once(monkeypatch):
    async def read(_fn, server_disc_id):
        return tomori_rows(server_disc_id)

    monkeypatch.setattr(tomori_state, "run_db", read)
    tomori_state._layer.fresh.reset_stats()
    state = await get_cached_tomori_state(5)

    def no_load(*_args, **_kwargs):
        raise AssertionError("a hit must not build or run a loader")

    monkeypatch.setattr(tomori_state._layer.cache, "get_or_load", no_load)
    monkeypatch.setattr(tomori_state._layer.fresh, "get_or_load", no_load)
    monkeypatch.setattr(_support.StaleFallbackCache, "_remembering", no_load)
    assert await get_cached_tomori_state(5) is state
    assert await get_cached_main_persona(5) is state.main_persona
    assert await get_cached_all_personas(5) == state.personas
    stats = tomori_state._layer.fresh.stats()
    assert (stats["hits"], stats["misses"], stats["loads"]) == (3, 1, 1)
