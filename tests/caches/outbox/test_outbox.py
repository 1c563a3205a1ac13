"""The outbox: events stored in the write's own transaction, and a follower that applies them to the real layers."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import DatabaseError, transaction

from caches import bus, outbox
from caches.core import MISSING, FakeClock
from caches.layers import tomori_state
from caches.models import InvalidationOutbox
from caches.outbox import OutboxFollower
from caches.registry import registry
from tomori.domain import models as m

pytestmark = pytest.mark.django_db(transaction=True)


class Applied:
    """What a follower delivered and flushed."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.flushes: list[str] = []

    def deliver(self, rows: list[tuple[Any, float, str]]) -> None:
        for events, _sent_at, _origin in rows:
            self.batches.append(list(events))
            bus.apply_to_registry(list(events))

    def flush(self, reason: str) -> None:
        self.flushes.append(reason)
        registry.clear_invalidatable()


@pytest.fixture
def applied() -> Applied:
    return Applied()


def follower(applied: Applied, **kw: Any) -> OutboxFollower:
    options = {"interval": 0.5, "retention": 3600.0, **kw}
    return OutboxFollower(deliver=applied.deliver, flush=applied.flush, **options)


def server_with_persona(name: str = "Tomori") -> tuple[m.Server, m.Persona]:
    server = m.Server.objects.create(server_disc_id=10**17 + m.Server.objects.count())
    return server, m.Persona.objects.create(server=server, name=name, is_main=True)


def personas(server: m.Server) -> list[str]:
    found = async_to_sync(tomori_state.get_cached_all_personas)(server.server_disc_id)
    return [p.name for p in found]


def cached(server: m.Server) -> Any:
    return registry.get("tomori_state").peek(server.server_disc_id)


def test_a_save_stores_its_events_in_the_outbox():
    before = outbox.newest_id()
    server, persona = server_with_persona()
    persona.name = "renamed"
    persona.save()
    rows = outbox.rows_after(before)
    assert rows and all(row.events for row in rows)
    assert ("tomori_state", "key", (server.server_disc_id,)) in rows[-1].events


def test_a_rolled_back_write_leaves_no_outbox_row():
    server, persona = server_with_persona()
    before = outbox.newest_id()
    with pytest.raises(RuntimeError), transaction.atomic():
        persona.name = "never"
        persona.save()
        raise RuntimeError
    assert outbox.rows_after(before) == []


def test_a_savepoint_rollback_drops_only_its_own_rows():
    kept, persona = server_with_persona()
    dropped, _ = server_with_persona()
    before = outbox.newest_id()
    with transaction.atomic():
        m.Persona.objects.filter(pk=persona.pk).update(name="kept")
        with pytest.raises(RuntimeError), transaction.atomic():
            m.Server.objects.filter(pk=dropped.pk).update(tool_use_enabled=False)
            raise RuntimeError
    events = [event for row in outbox.rows_after(before) for event in row.events]
    assert ("tomori_state", "key", (kept.server_disc_id,)) in events
    assert ("tomori_state", "key", (dropped.server_disc_id,)) not in events


def test_the_follower_invalidates_what_committed_without_the_bus(applied, monkeypatch):
    server, persona = server_with_persona("old")
    follow = follower(applied)
    follow.poll_once()  # starts at the newest row
    assert personas(server) == ["old"]
    # As if written by another process whose bus message never arrives.
    monkeypatch.setattr(bus, "broadcast", lambda *a, **kw: None)
    with transaction.atomic():
        m.Persona.objects.filter(pk=persona.pk).update(name="new")
    monkeypatch.undo()
    assert personas(server) == ["old"]  # nothing told this process yet
    assert follow.poll_once() == 1
    assert cached(server) is MISSING
    assert personas(server) == ["new"]


def test_rows_applied_through_the_bus_are_not_applied_again(applied):
    server, persona = server_with_persona()
    follow = follow_from_now(applied)
    persona.name = "via the bus"
    persona.save()
    follow.note_applied([row.id for row in outbox.rows_after(0)])
    assert follow.poll_once() == 0 and applied.batches == []


def follow_from_now(applied: Applied) -> OutboxFollower:
    follow = follower(applied)
    follow.poll_once()
    return follow


def test_a_follower_away_longer_than_the_retention_flushes(applied):
    clock = FakeClock()
    server, _ = server_with_persona("kept?")
    follow = follower(applied, retention=60.0, clock=clock)
    follow.poll_once()
    personas(server)
    clock.advance(61)
    follow.poll_once()
    assert applied.flushes and "away from the outbox" in applied.flushes[0]
    assert cached(server) is MISSING


def test_a_database_error_is_retried_and_logged_once(applied, caplog, monkeypatch):
    follow = follow_from_now(applied)

    def broken(*args: Any, **kw: Any) -> Any:
        raise DatabaseError("database is down")

    monkeypatch.setattr(outbox.store, "rows_after", broken)
    assert follow.poll_once() == 0 and follow.poll_once() == 0
    monkeypatch.undo()
    follow.poll_once()
    assert caplog.text.count("cannot read the invalidation outbox") == 1
    assert "reading the invalidation outbox again" in caplog.text


def test_old_rows_are_pruned():
    server_with_persona()
    stale = InvalidationOutbox.objects.create(
        created_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC), origin="old", events=[]
    )
    assert outbox.prune(older_than=dt.timedelta(hours=1)) >= 1
    assert not InvalidationOutbox.objects.filter(pk=stale.pk).exists()
    assert InvalidationOutbox.objects.exists()


def test_a_row_with_malformed_events_is_logged_and_the_rest_still_apply(
    applied, caplog
):
    from django.utils import timezone

    server, persona = server_with_persona("old")
    follow = follow_from_now(applied)
    personas(server)
    bad = InvalidationOutbox.objects.create(
        created_at=timezone.now(), origin="broken", events=[["user", "key"]]
    )
    with transaction.atomic():
        m.Persona.objects.filter(pk=persona.pk).update(name="new")

    assert follow.poll_once() == 2  # both rows are read; the bad one carries nothing
    assert f"row {bad.id} holds malformed events" in caplog.text
    assert applied.batches[0] == [] and personas(server) == ["new"]


def test_a_follower_starting_on_an_emptied_outbox_opens_no_gap_flood(applied):
    """Everything pruned (or truncated): the ids go on, the follower starts near them."""
    from django.db import connection

    from caches.outbox.tracker import MAX_GAPS

    server, persona = server_with_persona("before")
    InvalidationOutbox.objects.all().delete()
    with connection.cursor() as cursor:  # ids far past anything stored
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('caches_invalidation_outbox', "
            "'id'), nextval(pg_get_serial_sequence('caches_invalidation_outbox', "
            "'id')) + %s)",
            [2 * MAX_GAPS],
        )
    follow = follower(applied)
    follow.poll_once()  # starts on the empty table
    assert personas(server) == ["before"]
    with transaction.atomic():
        m.Persona.objects.filter(pk=persona.pk).update(name="after")
    follow.poll_once()
    assert applied.flushes == []
    assert personas(server) == ["after"]
