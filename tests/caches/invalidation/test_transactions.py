"""Invalidations apply on commit only: rollbacks apply nothing, savepoint rollbacks drop theirs."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from caches.invalidation import Event, capture, record
from caches.layers import emoji_sticker, tomori_state, webhook
from caches.registry import registry
from tests.caches.invalidation import probes

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
]


class Boom(Exception):
    """Raised to roll a block back."""


def names(state: Any) -> list[str]:
    """Return the persona names of a TomoriState (main first)."""
    return [p.name for p in state.personas]


def test_commit_applies_and_rollback_applies_nothing(
    layers, world, django_assert_num_queries
):
    server = world.server()
    persona = world.persona(server, name="kept")
    state = probes.state(server)
    layers.warm(state)

    with pytest.raises(Boom), transaction.atomic():
        persona.name = "rolled back"
        persona.save()
        raise Boom

    with django_assert_num_queries(0):
        assert names(layers.read(state)) == ["main", "kept"]  # still cached

    with transaction.atomic():
        persona.name = "committed"
        persona.save()
        # Not yet: the transaction is still open, the cached value stays.
        with django_assert_num_queries(0):
            assert names(layers.read(state)) == ["main", "kept"]

    assert names(layers.read(state)) == ["main", "committed"]


def test_savepoint_rollback_drops_only_its_own_events(
    layers, world, django_assert_num_queries
):
    first, second = world.server(), world.server()
    inner_persona = world.persona(first, name="inner before")
    outer_persona = world.persona(second, name="outer before")
    inner, outer = probes.state(first), probes.state(second)
    layers.warm(inner, outer)

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
    with django_assert_num_queries(0):
        assert names(layers.read(inner)) == ["main", "inner before"]
    assert names(layers.read(outer)) == ["main", "outer"]


def test_released_savepoint_keeps_its_events(layers, world):
    server = world.server()
    persona = world.persona(server)
    state = probes.state(server)
    layers.warm(state)

    with transaction.atomic(), transaction.atomic():
        persona.name = "inner"
        persona.save()

    assert names(layers.read(state)) == ["main", "inner"]


def test_autocommit_write_applies_at_once(layers, world):
    server = world.server()
    persona = world.persona(server)
    state = probes.state(server)
    layers.warm(state)

    persona.name = "autocommit"
    persona.save()

    assert names(layers.read(state)) == ["main", "autocommit"]


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


def test_record_outside_a_transaction_dispatches_at_once(layers, world, local_bus):
    server = world.server()
    expressions = probes.expressions(server)
    layers.warm(expressions)
    before = local_bus.snapshot()["local"]

    record([Event(emoji_sticker.NAME, "key", (server.id,))])

    with CaptureQueriesContext(connection) as queries:
        layers.read(expressions)
    assert len(queries) > 0  # a miss: the layer loads again
    assert local_bus.snapshot()["local"] == before + 1


def test_a_failing_cache_op_does_not_fail_the_write(
    layers, world, local_bus, caplog, monkeypatch
):
    server = world.server()
    persona = world.persona(server)
    state = probes.state(server)
    layers.warm(state)

    def broken(*args: object) -> int:
        raise RuntimeError("layer bug")

    monkeypatch.setitem(registry.entry(webhook.NAME).ops, "persona", broken)
    persona.avatar_url = "http://new/avatar.png"
    persona.save()

    # tomori_state was still applied.
    served = layers.read(state)
    assert [p.avatar_url for p in served.personas][1:] == ["http://new/avatar.png"]
    assert "could not apply webhook.persona" in caplog.text
    assert tomori_state.NAME in registry.names()
