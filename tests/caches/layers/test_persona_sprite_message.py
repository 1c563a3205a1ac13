"""Persona sprite message layer: negatives, batched priming, seeding, retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from caches.core import MISSING, FakeClock
from caches.layers import persona_sprite_message as layer
from caches.layers.persona_sprite_message import (
    get_cached_persona_sprite_message,
    prime_persona_sprite_message_records,
    record_persona_sprite_message,
)
from caches.registry import registry
from tomori.domain.models import PersonaSpriteMessage
from tomori.domain.repositories import sprites as sprites_repo

pytestmark = pytest.mark.django_db

TTL = 120 * 60.0


def record(run, persona, message_id: int):
    return run(
        record_persona_sprite_message,
        message_disc_id=message_id,
        persona_id=persona.id,
        sprite_name="happy",
        channel_disc_id=5,
    )


def test_recording_seeds_the_cache(run, persona, django_assert_num_queries):
    stored = record(run, persona, 1)
    assert PersonaSpriteMessage.objects.filter(message_disc_id=1).exists()
    with django_assert_num_queries(0):
        assert run(get_cached_persona_sprite_message, 1) == stored


def test_plain_message_is_a_negative_entry(run, django_assert_num_queries):
    assert run(get_cached_persona_sprite_message, 404) is None
    with django_assert_num_queries(0):
        assert run(get_cached_persona_sprite_message, 404) is None


def test_prime_loads_uncached_ids_in_one_query(run, persona, django_assert_num_queries):
    for message_id in (1, 2):
        sprites_repo.sprite_message_create(
            message_disc_id=message_id,
            persona_id=persona.id,
            sprite_name="sad",
            channel_disc_id=5,
        )
    run(get_cached_persona_sprite_message, 3)  # already cached: not asked again
    with django_assert_num_queries(1):
        seeded = run(prime_persona_sprite_message_records, [1, 2, 3, 4, 4])
    assert seeded == 3
    with django_assert_num_queries(0):
        assert run(get_cached_persona_sprite_message, 1).sprite_name == "sad"
        assert run(get_cached_persona_sprite_message, 4) is None
        assert run(prime_persona_sprite_message_records, [1, 2, 3, 4]) == 0


def test_prime_seeds_nothing_on_a_database_error(run, db_down):
    db_down(sprites_repo, "get_sprite_messages")
    assert run(prime_persona_sprite_message_records, [1, 2]) == 0
    assert len(layer._layer.cache) == 0


def test_lookup_caches_nothing_on_a_database_error(run, db_down):
    db_down(sprites_repo, "get_sprite_messages")
    assert run(get_cached_persona_sprite_message, 1) is None
    assert layer._layer.cache.get(1) is MISSING


def test_entries_expire_to_bound_memory(run, clock):
    run(get_cached_persona_sprite_message, 9)
    clock.advance(TTL + 1)
    assert len(layer._layer.cache) == 0


def test_layer_is_not_invalidatable():
    assert registry.entry("persona_sprite_message").invalidatable is False


def test_retention_prune_runs_at_most_once_per_interval(run, persona, count_calls):
    prune_clock = FakeClock(start=0.0)
    layer.set_retention_clock(prune_clock)
    old = sprites_repo.sprite_message_create(
        message_disc_id=100, persona_id=persona.id, sprite_name="old", channel_disc_id=5
    )
    PersonaSpriteMessage.objects.filter(message_disc_id=old.message_disc_id).update(
        created_at=timezone.now() - timedelta(days=31)
    )
    prunes = count_calls(sprites_repo, "prune_sprite_messages")
    record(run, persona, 1)
    assert not PersonaSpriteMessage.objects.filter(message_disc_id=100).exists()
    record(run, persona, 2)
    prune_clock.advance(layer.PRUNE_INTERVAL_SECONDS - 1)
    record(run, persona, 3)
    assert prunes.calls == 1
    prune_clock.advance(2)
    record(run, persona, 4)
    assert prunes.calls == 2


def test_failed_prune_does_not_fail_the_write(run, persona, db_down):
    layer.set_retention_clock(FakeClock())
    db_down(sprites_repo, "prune_sprite_messages")
    assert record(run, persona, 1).sprite_name == "happy"


def test_failed_write_raises_and_seeds_nothing(run, persona, db_down):
    db_down(sprites_repo, "sprite_message_create")
    with pytest.raises(OperationalError):
        record(run, persona, 1)
    assert len(layer._layer.cache) == 0
