"""Invalidations apply on commit only: rollbacks apply nothing, savepoint rollbacks drop theirs."""

from __future__ import annotations

import pytest
from django.db import transaction

from caches.core import MISSING
from caches.invalidation import Event, capture, record

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
]


class Boom(Exception):
    """Raised to roll a block back."""


def test_commit_applies_and_rollback_applies_nothing(caches, world):
    server = world.server()
    persona = world.persona(server, name="kept")
    cached = caches.read("tomori_state", server.server_disc_id)

    with pytest.raises(Boom), transaction.atomic():
        persona.name = "rolled back"
        persona.save()
        raise Boom

    assert caches.cached("tomori_state", server.server_disc_id) is cached

    with transaction.atomic():
        persona.name = "committed"
        persona.save()
        # Not yet: the transaction is still open.
        assert caches.cached("tomori_state", server.server_disc_id) is cached

    assert caches.read("tomori_state", server.server_disc_id)[4][0][1] == "committed"
    assert caches.stale() == []


def test_savepoint_rollback_drops_only_its_own_events(caches, world):
    first, second = world.server(), world.server()
    inner_persona = world.persona(first)
    outer_persona = world.persona(second)
    inner_cached = caches.read("tomori_state", first.server_disc_id)
    caches.read("tomori_state", second.server_disc_id)

    with capture() as seen, transaction.atomic():
        outer_persona.name = "outer"
        outer_persona.save()
        with pytest.raises(Boom), transaction.atomic():
            inner_persona.name = "inner"
            inner_persona.save()
            raise Boom
        inner_persona.refresh_from_db()

    assert Event("tomori_state", "key", (first.server_disc_id,)) not in seen.dispatched
    assert Event("tomori_state", "key", (second.server_disc_id,)) in seen.dispatched
    assert caches.cached("tomori_state", first.server_disc_id) is inner_cached
    assert caches.stale() == []


def test_released_savepoint_keeps_its_events(caches, world):
    server = world.server()
    persona = world.persona(server)
    caches.read("tomori_state", server.server_disc_id)

    with transaction.atomic(), transaction.atomic():
        persona.name = "inner"
        persona.save()

    assert caches.stale() == []


def test_autocommit_write_applies_at_once(caches, world):
    server = world.server()
    persona = world.persona(server)
    caches.read("tomori_state", server.server_disc_id)

    persona.name = "autocommit"
    persona.save()

    assert caches.stale() == []


def test_capture_sees_recorded_events_before_commit_and_dispatched_after(world):
    server = world.server()
    expected = Event("tomori_state", "key", (server.server_disc_id,))

    with capture() as seen:
        with transaction.atomic():
            server.name = "renamed"
            server.save()
            assert expected in seen.recorded
            assert seen.dispatched == []
        assert expected in seen.dispatched


def test_record_outside_a_transaction_dispatches_at_once(caches, world, local_bus):
    server = world.server()
    caches.read("emoji_sticker", server.id)
    before = local_bus.snapshot()["local"]

    record([Event("emoji_sticker", "key", (server.id,))])

    assert caches.cached("emoji_sticker", server.id) is MISSING
    assert local_bus.snapshot()["local"] == before + 1


def test_a_failing_cache_op_does_not_fail_the_write(caches, world, local_bus, caplog):
    server = world.server()
    persona = world.persona(server)
    caches.read("tomori_state", server.server_disc_id)

    def broken(*args):
        raise RuntimeError("layer bug")

    from caches.registry import registry

    registry.entry("webhook").ops["persona"] = broken
    persona.avatar_url = "http://new/avatar.png"
    persona.save()

    assert caches.stale() == []  # tomori_state was still applied
    assert "could not apply webhook.persona" in caplog.text
