"""Writes made outside Django reach the caches: the database records them in the outbox.

Every write here is made by a real second client, a psycopg connection of
its own with no Django in it (as psql, another service or the upstream bot
would), and the follower applies what the triggers recorded to the real
layers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.core import checks
from django.db import connection, migrations

from caches import outbox
from caches.core import MISSING
from caches.layers import tomori_state
from caches.models import InvalidationOutbox
from caches.outbox import capture
from caches.registry import Event, registry
from tests.support.outside import outside_client, registry_follower
from tomori.domain import models as m

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
]


@pytest.fixture
def psql() -> Iterator[psycopg.Connection[Any]]:
    """A client of the test database that is not Django (autocommit, like psql)."""
    client = outside_client()
    yield client
    client.close()


def guild(name: str = "Tomori", disc: int = 0) -> tuple[m.Server, m.Persona]:
    server = m.Server.objects.create(
        server_disc_id=10**17 + disc + m.Server.objects.count()
    )
    return server, m.Persona.objects.create(server=server, name=name, is_main=True)


def recorded_since(high: int) -> list[Event]:
    """Return every event the outbox holds above `high`, in order."""
    return [Event(*e) for row in outbox.rows_after(high) for e in row.events]


def names(server: m.Server) -> list[str]:
    found = async_to_sync(tomori_state.get_cached_all_personas)(server.server_disc_id)
    return [p.name for p in found]


def test_every_feeding_table_is_captured_as_declared() -> None:
    assert capture.differences(connection) == []
    installed = capture._installed(connection)
    for table in capture.sources():
        for op in ("ins", "upd", "del", "trn"):
            assert f"tomori_inv_{table}_{op}" in installed


def test_the_captured_tables_are_the_layers_feeds() -> None:
    tables = set(capture.sources())
    assert {"personas", "servers", "channel_whitelist_personas"} <= tables
    assert "persona_sprite_messages" not in tables  # immutable: fed by nothing


def test_a_dropped_trigger_is_a_database_check_warning() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER tomori_inv_personas_upd ON personas")
    found = checks.run_checks(databases=["default"], tags=[checks.Tags.database])
    warnings = [w for w in found if w.id == "caches.W020"]
    assert warnings and "tomori_inv_personas_upd" in warnings[0].msg
    capture.sync(connection)
    found = checks.run_checks(databases=["default"], tags=[checks.Tags.database])
    assert [w for w in found if w.id == "caches.W020"] == []


def test_a_capture_function_whose_setting_was_reset_differs() -> None:
    """`jit = off` is part of the capture: without it a bulk UPDATE compiles for longer than it runs."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER FUNCTION tomori_inv_personas_upd() RESET jit")
    assert capture.differences(connection) == [
        "trigger tomori_inv_personas_upd on personas differs from the feeds"
    ]
    capture.sync(connection)
    assert capture.differences(connection) == []


def test_an_autocommit_update_is_recorded(psql) -> None:
    server, persona = guild()
    high = outbox.newest_id()
    psql.execute("UPDATE personas SET name = 'renamed' WHERE id = %s", [persona.pk])
    rows = outbox.rows_after(high)
    assert [row.origin.split(":")[:2] for row in rows] == [["database", "psql"]]
    assert Event("tomori_state", "key", (server.server_disc_id,)) in recorded_since(
        high
    )


def test_a_transaction_with_other_statements_and_a_rename_back(psql) -> None:
    server, persona = guild("A")
    high = outbox.newest_id()
    with psql.transaction():
        psql.execute("UPDATE personas SET name = 'B' WHERE id = %s", [persona.pk])
        psql.execute("SELECT count(*) FROM servers")
        psql.execute("UPDATE personas SET name = 'A' WHERE id = %s", [persona.pk])
    assert Event("tomori_state", "key", (server.server_disc_id,)) in recorded_since(
        high
    )


def test_a_rolled_back_transaction_records_nothing(psql) -> None:
    _, persona = guild()
    high = outbox.newest_id()
    with pytest.raises(RuntimeError), psql.transaction():
        psql.execute("UPDATE personas SET name = 'never' WHERE id = %s", [persona.pk])
        raise RuntimeError
    assert outbox.rows_after(high) == []


def test_an_update_of_columns_no_layer_reads_records_nothing(psql) -> None:
    server, _ = guild()
    high = outbox.newest_id()
    psql.execute("UPDATE servers SET name = name WHERE id = %s", [server.pk])
    assert recorded_since(high) == []


def test_a_moved_row_invalidates_the_old_and_the_new_key(psql) -> None:
    first, _ = guild()
    persona = m.Persona.objects.create(server=first, name="moving")
    second, _ = guild("other", disc=10**6)
    high = outbox.newest_id()
    psql.execute(
        "UPDATE personas SET server_id = %s WHERE id = %s", [second.pk, persona.pk]
    )
    events = recorded_since(high)
    assert Event("tomori_state", "key", (first.server_disc_id,)) in events
    assert Event("tomori_state", "key", (second.server_disc_id,)) in events


def test_insert_and_delete_are_recorded(psql) -> None:
    server, _ = guild()
    high = outbox.newest_id()
    psql.execute(
        "INSERT INTO persona_sprites (persona_id, name, position, image_url, "
        "instructions) SELECT id, 'wave', 0, 'http://x/1', '' FROM personas "
        "WHERE server_id = %s",
        [server.pk],
    )
    persona_id = m.Persona.objects.get(server=server).pk
    assert recorded_since(high) == [Event("persona_sprite", "key", (persona_id,))]
    high = outbox.newest_id()
    psql.execute("DELETE FROM persona_sprites WHERE persona_id = %s", [persona_id])
    assert recorded_since(high) == [Event("persona_sprite", "key", (persona_id,))]


def test_deleting_a_server_and_its_rows_in_one_transaction(psql) -> None:
    server, persona = guild()
    high = outbox.newest_id()
    with psql.transaction():
        psql.execute("DELETE FROM personas WHERE server_id = %s", [server.pk])
        psql.execute("DELETE FROM servers WHERE id = %s", [server.pk])
    events = recorded_since(high)
    assert Event("tomori_state", "key", (server.server_disc_id,)) in events
    assert Event("webhook", "persona", (persona.pk,)) in events


def test_an_m2m_row_written_outside_django_is_recorded(psql) -> None:
    server, persona = guild()
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=21)
    high = outbox.newest_id()
    psql.execute(
        "INSERT INTO channel_whitelist_personas (whitelistedchannel_id, persona_id) "
        "VALUES (%s, %s)",
        [row.pk, persona.pk],
    )
    assert Event(
        "channel_whitelist", "channel", (server.server_disc_id, 21)
    ) in recorded_since(high)


def test_a_bulk_update_of_many_rows_is_recorded_in_bounded_rows(psql) -> None:
    server, persona = guild()
    psql.execute(
        "INSERT INTO persona_sprites (persona_id, name, position, image_url, "
        "instructions) SELECT %s, 's' || g, g, 'http://x/' || g, '' "
        "FROM generate_series(1, 10000) g",
        [persona.pk],
    )
    others = [guild(f"p{i}", disc=10**6 * (i + 2))[1] for i in range(3)]
    high = outbox.newest_id()
    psql.execute(
        "UPDATE personas SET position = position + 1 WHERE id = ANY(%s)",
        [[persona.pk, *(p.pk for p in others)]],
    )
    psql.execute("UPDATE persona_sprites SET position = position + 1")
    rows = outbox.rows_after(high)
    assert all(len(row.events) <= capture.CHUNK for row in rows)
    events = recorded_since(high)
    assert len(events) == len(set(events)) == 4 + 1


def test_a_migrations_run_sql_is_recorded() -> None:
    server, persona = guild()
    high = outbox.newest_id()
    operation = migrations.RunSQL(
        f"UPDATE personas SET name = 'by a migration' WHERE id = {persona.pk}"
    )
    with connection.schema_editor() as editor:
        operation.database_forwards("tomori", editor, None, None)  # type: ignore[arg-type]
    assert Event("tomori_state", "key", (server.server_disc_id,)) in recorded_since(
        high
    )


def test_a_django_write_claims_what_its_statements_recorded() -> None:
    _, persona = guild()
    high = outbox.newest_id()
    persona.name = "by django"
    persona.save()
    rows = outbox.rows_after(high)
    assert len(rows) == 1 and not rows[0].origin.startswith("database")
    assert not InvalidationOutbox.objects.filter(tx__isnull=False, id__gt=high).exists()


def test_a_django_write_stores_each_event_once() -> None:
    """The triggers recorded the statement Django tracked too: the claim keeps one copy."""
    _, persona = guild()
    high = outbox.newest_id()
    m.Persona.objects.filter(pk=persona.pk).update(name="once")
    (row,) = outbox.rows_after(high)
    events = list(row.events)
    assert events and len(events) == len(set(events))


def test_raw_sql_in_a_django_transaction_goes_out_with_its_write(psql) -> None:
    from django.db import transaction

    server, persona = guild()
    other, other_persona = guild("other", disc=10**6)
    high = outbox.newest_id()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE personas SET name = 'raw' WHERE id = %s", [other_persona.pk]
            )
        persona.name = "tracked"
        persona.save()
    rows = outbox.rows_after(high)
    assert len(rows) == 1
    assert Event("tomori_state", "key", (other.server_disc_id,)) in rows[0].events


def test_the_follower_applies_an_outside_write_to_the_real_layer(psql) -> None:
    server, persona = guild("old")
    follower = registry_follower()
    follower.poll_once()  # starts at the newest row
    assert names(server) == ["old"]
    psql.execute("UPDATE personas SET name = 'new' WHERE id = %s", [persona.pk])
    assert names(server) == ["old"]  # nothing told this process yet
    assert follower.poll_once() == 1
    assert registry.get("tomori_state").peek(server.server_disc_id) is MISSING
    assert names(server) == ["new"]
