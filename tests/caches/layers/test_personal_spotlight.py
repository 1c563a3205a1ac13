"""Personal spotlight layer: the gate, capped results, exact-match invalidation."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.utils import timezone

from caches.core import MISSING
from caches.layers import personal_spotlight as layer
from caches.layers.personal_spotlight import (
    get_cached_personal_spotlight_status,
    spotlight_cache_key,
)
from caches.registry import registry
from tomori.domain.models import PersonalSpotlight
from tomori.domain.repositories import spotlight as spotlight_repo
from tomori.domain.repositories.spotlight import SpotlightRecord

pytestmark = pytest.mark.django_db

TTL = 5 * 60.0
CHANNEL = 12


@pytest.fixture
def spotlit(make_server, make_persona, make_user):
    """A server where one user spotlights the main persona in CHANNEL."""
    server = make_server()
    persona = make_persona(server, is_main=True)
    user = make_user()
    spotlight_repo.personal_spotlight_set(
        server_id=server.id,
        user_id=user.id,
        channel_disc_id=CHANNEL,
        persona_id=persona.id,
    )
    return server, user, persona


def status(run, server_id, user_id, channel):
    return run(get_cached_personal_spotlight_status, server_id, user_id, channel)


def test_spotlight_is_found_and_cached(run, spotlit, django_assert_num_queries):
    server, user, persona = spotlit
    assert status(run, server.id, user.id, CHANNEL).persona_id == persona.id
    with django_assert_num_queries(0):
        assert status(run, server.id, user.id, CHANNEL).persona_id == persona.id


def test_miss_is_cached_as_none(run, spotlit, django_assert_num_queries):
    server, user, _ = spotlit
    assert status(run, server.id, user.id, CHANNEL + 1) is None
    assert (
        layer._layer.results.get(spotlight_cache_key(server.id, user.id, CHANNEL + 1))
        is None
    )
    with django_assert_num_queries(0):
        assert status(run, server.id, user.id, CHANNEL + 1) is None


def test_server_without_spotlights_creates_no_result_entries(
    run, make_server, django_assert_num_queries
):
    server = make_server()

    async def every_user_in_every_channel() -> set[object]:
        return {
            await get_cached_personal_spotlight_status(server.id, user_id, channel)
            for user_id in range(1000)
            for channel in range(10)
        }

    with django_assert_num_queries(1):  # the gate's one query
        assert run(every_user_in_every_channel) == {None}
    assert len(layer._layer.results) == 0
    assert len(layer._layer.gate) == 1


def test_gate_entries_count_in_the_layer_size(run, spotlit, make_server):
    server, user, _ = spotlit
    status(run, server.id, user.id, CHANNEL)  # a gate entry and a result
    status(run, make_server().id, user.id, CHANNEL)  # a gate entry only
    assert registry.sizes()["personal_spotlight"] == 3
    stats = registry.stats()["personal_spotlight"]
    assert stats["members"] == {"primary": 1, "gate": 2}
    assert stats["cap"] == layer._layer.results.maxsize + layer._layer.gate.maxsize
    assert registry.clear("personal_spotlight") == 3


def test_result_cap_holds_under_100k_triples(run, monkeypatch):
    async def no_spotlight(*_args: object) -> None:
        return None

    async def has_spotlights(_server_id: int) -> bool:
        return True

    monkeypatch.setattr(layer, "_load_status", no_spotlight)
    monkeypatch.setattr(layer, "_server_has_spotlights", has_spotlights)
    cap = layer._layer.results.maxsize

    async def flood() -> None:
        for i in range(100_000):
            await get_cached_personal_spotlight_status(1, i // 10, i % 10)
            assert len(layer._layer.results) <= cap

    run(flood)
    assert len(layer._layer.results) == cap
    assert layer._layer.results.stats()["evictions"] == 100_000 - cap


def test_repository_status_query_deletes_expired_rows_first(spotlit, make_user):
    server, _, persona = spotlit
    other = make_user()
    spotlight_repo.personal_spotlight_set(
        server_id=server.id,
        user_id=other.id,
        channel_disc_id=CHANNEL,
        persona_id=persona.id,
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    found = spotlight_repo.get_personal_spotlight_status(
        server_id=server.id, user_id=other.id, channel_disc_id=CHANNEL
    )
    assert found is None
    assert PersonalSpotlight.objects.filter(server_id=server.id).count() == 1


def test_repository_status_query_is_one_query_without_expired_rows(
    spotlit, django_assert_num_queries
):
    server, user, persona = spotlit
    with django_assert_num_queries(1):
        found = spotlight_repo.get_personal_spotlight_status(
            server_id=server.id, user_id=user.id, channel_disc_id=CHANNEL
        )
    assert found == SpotlightRecord(persona_id=persona.id, expires_at=None)
    with django_assert_num_queries(1):
        assert (
            spotlight_repo.get_personal_spotlight_status(
                server_id=server.id, user_id=user.id, channel_disc_id=CHANNEL + 1
            )
            is None
        )


def test_repository_status_query_deletes_the_triples_own_expired_row(spotlit):
    server, user, persona = spotlit
    later = timezone.now() + timedelta(hours=1)
    spotlight_repo.personal_spotlight_set(
        server_id=server.id,
        user_id=user.id,
        channel_disc_id=CHANNEL + 1,
        persona_id=persona.id,
        expires_at=later,
    )
    PersonalSpotlight.objects.filter(channel_disc_id=CHANNEL).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert (
        spotlight_repo.get_personal_spotlight_status(
            server_id=server.id, user_id=user.id, channel_disc_id=CHANNEL
        )
        is None
    )
    assert list(
        PersonalSpotlight.objects.filter(server_id=server.id).values_list(
            "channel_disc_id", flat=True
        )
    ) == [CHANNEL + 1]  # the unexpired one stays
    found = spotlight_repo.get_personal_spotlight_status(
        server_id=server.id, user_id=user.id, channel_disc_id=CHANNEL + 1
    )
    assert found is not None and found.expires_at == later


def test_expired_cached_result_is_not_served(run, spotlit):
    server, user, persona = spotlit
    key = spotlight_cache_key(server.id, user.id, CHANNEL)
    past = timezone.now() - timedelta(seconds=1)
    layer._layer.gate.set(server.id, True)
    layer._layer.results.set(
        key, SpotlightRecord(persona_id=persona.id, expires_at=past)
    )
    assert status(run, server.id, user.id, CHANNEL) is None
    assert layer._layer.results.get(key) is MISSING


def test_gate_and_results_expire(run, spotlit, count_calls, clock):
    server, user, _ = spotlit
    gates = count_calls(spotlight_repo, "server_has_personal_spotlights")
    loads = count_calls(spotlight_repo, "get_personal_spotlight_status")
    status(run, server.id, user.id, CHANNEL)
    clock.advance(TTL - 1)
    status(run, server.id, user.id, CHANNEL)
    clock.advance(2)
    status(run, server.id, user.id, CHANNEL)
    assert (gates.calls, loads.calls) == (2, 2)


def test_first_spotlight_takes_effect_after_invalidation(
    run, make_server, make_persona, make_user
):
    server, user = make_server(), make_user()
    persona = make_persona(server, is_main=True)
    assert status(run, server.id, user.id, CHANNEL) is None  # gate says none
    spotlight_repo.personal_spotlight_set(
        server_id=server.id,
        user_id=user.id,
        channel_disc_id=CHANNEL,
        persona_id=persona.id,
    )
    registry.apply("personal_spotlight", "spotlight", server.id, user.id, CHANNEL)
    assert status(run, server.id, user.id, CHANNEL).persona_id == persona.id


def test_invalidation_matches_ids_exactly(run, spotlit):
    server, user, _ = spotlit
    for channel in (CHANNEL, CHANNEL * 10, CHANNEL * 10 + 3):  # 12, 120, 123
        status(run, server.id, user.id, channel)
    status(run, server.id, user.id * 10, CHANNEL)
    removed = registry.apply(
        "personal_spotlight", "spotlight", server.id, user.id, CHANNEL
    )
    assert removed == 2  # the gate and the one exact triple
    assert len(layer._layer.results) == 3
    assert layer._layer.gate.get(server.id) is MISSING


def test_invalidation_by_user_or_server(run, spotlit, make_server):
    server, user, _ = spotlit
    other_server = make_server()
    for channel in (1, 2):
        status(run, server.id, user.id, channel)
    status(run, server.id, user.id + 1, 1)
    status(run, other_server.id, user.id, 1)
    assert layer.invalidate_personal_spotlight_cache(server.id, user.id) == 3
    assert layer.invalidate_personal_spotlight_cache(server.id) == 1
    assert len(layer._layer.gate) == 1  # the other server's gate is untouched


def test_a_server_drop_on_the_loop_goes_in_steps_and_serves_nothing_stale(
    run, spotlit, make_persona
):
    server, user, persona = spotlit
    assert status(run, server.id, user.id, CHANNEL).persona_id == persona.id
    for other in range(300):  # other users' cached "no spotlight" results
        layer._layer.results.set(
            spotlight_cache_key(server.id, 10_000 + other, CHANNEL), None
        )
    elsewhere = spotlight_cache_key(server.id + 1, user.id, CHANNEL)
    layer._layer.results.set(elsewhere, None)
    # The row changes without a commit, so nothing invalidates: the cache is stale.
    second = make_persona(server)
    spotlight_repo.personal_spotlight_set(
        server_id=server.id,
        user_id=user.id,
        channel_disc_id=CHANNEL,
        persona_id=second.id,
    )

    key = spotlight_cache_key(server.id, user.id, CHANNEL)

    async def drop_then_read() -> tuple[int, int]:
        # The gate and 301 results, answered at once; the results go in steps.
        assert layer.invalidate_personal_spotlight_cache(server.id) == 302
        layer._layer.gate.set(server.id, True)  # as another reader would reload it
        assert server.id in layer._layer.drops.pending
        assert layer._layer.results.peek(key).persona_id == persona.id  # still resident
        read = await get_cached_personal_spotlight_status(server.id, user.id, CHANNEL)
        assert read.persona_id == second.id  # the table's, never the stale entry
        for _ in range(1000):  # bounded: a drop that never ends fails, not hangs
            if not layer._layer.drops.pending:
                break
            await asyncio.sleep(0)
        assert not layer._layer.drops.pending
        return len(layer._layer.results), layer._layer.drops.steps

    resident, steps = run(drop_then_read)
    assert resident == 1 and steps >= 301 // 64  # the other server's result only
    assert layer._layer.results.peek(elsewhere) is None
    # Once the drop is done, reads are cached again.
    assert status(run, server.id, user.id, CHANNEL).persona_id == second.id
    assert layer._layer.results.peek(spotlight_cache_key(server.id, user.id, CHANNEL))


def test_database_error_caches_nothing(run, spotlit, db_down):
    server, user, _ = spotlit
    db_down(spotlight_repo, "get_personal_spotlight_status")
    from django.db import OperationalError

    with pytest.raises(OperationalError):
        status(run, server.id, user.id, CHANNEL)
    assert len(layer._layer.results) == 0
