"""The consistency watcher finds a real inconsistency, and forgives a change still within the bound."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from caches.consistency import NINES_CAP, ConsistencyWatcher, nines
from caches.core import MISSING, FakeClock
from caches.layers import tomori_state
from caches.registry import registry
from tomori.domain import models as m

BOUND = 2.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=100.0)


@pytest.fixture
def watcher(clock: FakeClock) -> ConsistencyWatcher:
    return ConsistencyWatcher(
        registry, checks_per_second=10, bound_seconds=BOUND, clock=clock
    )


@sync_to_async
def guild(name: str) -> tuple[int, int]:
    server = m.Server.objects.create(server_disc_id=10**17 + m.Server.objects.count())
    persona = m.Persona.objects.create(server=server, name=name, is_main=True)
    return server.server_disc_id, persona.pk


@sync_to_async
def rename_behind_the_caches_back(persona_id: int, name: str) -> None:
    # Raw SQL that no invalidation rule sees: a genuine inconsistency.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {m.Persona._meta.db_table} SET name = %s WHERE id = %s",
            [name, persona_id],
        )


@pytest.mark.django_db(transaction=True)
async def test_a_consistent_entry_is_counted_as_checked(watcher):
    server, _ = await guild("same")
    await tomori_state.get_cached_all_personas(server)
    await watcher.check_key(registry.entry("tomori_state"), server)
    assert watcher.summary()["tomori_state"] == {
        "checked": 1,
        "inconsistent": 0,
        "repairs": 0,
        "ratio": 1.0,
        "nines": NINES_CAP,
    }


@pytest.mark.django_db(transaction=True)
async def test_a_write_that_bypassed_invalidation_is_reported(watcher, clock, caplog):
    server, persona = await guild("before")
    await tomori_state.get_cached_all_personas(server)
    await rename_behind_the_caches_back(persona, "after")
    entry = registry.entry("tomori_state")

    await watcher.check_key(entry, server)
    assert watcher.summary()["tomori_state"]["inconsistent"] == 0  # only a suspect
    clock.advance(BOUND - 0.5)
    await watcher.check_key(entry, server)
    assert watcher.summary()["tomori_state"]["inconsistent"] == 0  # still in bound
    clock.advance(1.0)
    assert await watcher.check_next()  # the due suspect comes first

    summary = watcher.summary()["tomori_state"]
    assert summary["inconsistent"] == 1 and summary["checked"] == 1
    assert f"tomori_state[{server}] differs from the database" in caplog.text
    assert caplog.text.count("differs from the database") == 1


@pytest.mark.django_db(transaction=True)
async def test_a_change_whose_invalidation_arrives_within_the_bound_is_forgiven(
    watcher, clock
):
    server, persona = await guild("before")
    await tomori_state.get_cached_all_personas(server)
    await rename_behind_the_caches_back(persona, "after")
    entry = registry.entry("tomori_state")
    await watcher.check_key(entry, server)  # a suspect
    tomori_state.invalidate_tomori_state_cache(server)  # the invalidation lands
    await tomori_state.get_cached_all_personas(server)  # reloaded: "after"
    clock.advance(BOUND + 1)
    await watcher.check_key(entry, server)
    assert watcher.summary()["tomori_state"] == {
        "checked": 1,
        "inconsistent": 0,
        "repairs": 0,
        "ratio": 1.0,
        "nines": NINES_CAP,
    }


def test_nines():
    assert nines(None) is None
    assert nines(1.0) == NINES_CAP == 9.0  # a perfect record: finite
    assert nines(0.999) == pytest.approx(3.0)
    assert nines(1.0 - 1e-12) == NINES_CAP  # never more than the cap


def test_every_watched_layer_reloads_what_it_caches():
    from caches.layers import load_all

    load_all()
    watched = {
        e.name
        for e in ConsistencyWatcher(
            registry, checks_per_second=1, bound_seconds=1
        ).watched()
    }
    assert {
        "tomori_state",
        "user",
        "st_preset",
        "guild_mcp_config",
        "channel_whitelist",
        "channel_llm",
        "channel_prompt",
    } <= watched


@sync_to_async
def override_behind_the_caches_back(server_disc_id: int, channel: int) -> int:
    server = m.Server.objects.get(server_disc_id=server_disc_id)
    llm = m.Llm.objects.create(provider="openrouter", codename=f"m-{channel}")
    with connection.cursor() as cursor:  # no invalidation rule sees it
        cursor.execute(
            f"INSERT INTO {m.ChannelLlmOverride._meta.db_table} "
            "(server_id, channel_disc_id, llm_id, updated_at) "
            "VALUES (%s, %s, %s, now())",
            [server.pk, channel, llm.pk],
        )
    return server.pk


@pytest.mark.django_db(transaction=True)
async def test_the_gates_of_the_channel_layers_are_sampled_and_repaired(watcher, clock):
    from caches.layers import channel_llm, channel_whitelist

    server, _ = await guild("main")
    await channel_whitelist.get_cached_whitelist_status(server, 5, role_ids=[])
    server_id = await sync_to_async(
        lambda: m.Server.objects.get(server_disc_id=server).pk
    )()
    assert await channel_llm.get_cached_channel_llm(server_id, 5) is None
    # Both maps of each layer are sampled: the server's gate (or rows) too.
    whitelist = registry.entry("channel_whitelist")
    sampled = whitelist.cache.keys()  # type: ignore[attr-defined]
    assert server in sampled
    for key in sampled:
        await watcher.check_key(whitelist, key)
    assert watcher.summary()["channel_whitelist"]["checked"] == 2

    await override_behind_the_caches_back(server, 5)
    entry = registry.entry("channel_llm")
    await watcher.check_key(entry, server_id)  # the gate: a suspect
    clock.advance(BOUND + 1)
    await watcher.check_key(entry, server_id)
    assert watcher.summary()["channel_llm"]["inconsistent"] == 1
    assert channel_llm._layer.gate.peek(server_id) is MISSING  # repaired
    assert await channel_llm.get_cached_channel_llm(server_id, 5) is not None
