"""A write from outside Django (a raw psycopg client) is found, repaired and counted once by the watcher."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from caches.consistency import ConsistencyWatcher
from caches.core import MISSING, FakeClock
from caches.layers import tomori_state
from caches.registry import registry
from tests.support.outside import outside_client
from tomori.domain import models as m

BOUND = 2.0

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
]


@sync_to_async
def guild(name: str) -> tuple[int, int]:
    server = m.Server.objects.create(server_disc_id=10**17 + m.Server.objects.count())
    persona = m.Persona.objects.create(server=server, name=name, is_main=True)
    return server.server_disc_id, persona.pk


def _outside_rename(persona_id: int, name: str) -> None:
    """Rename a persona from a second client: no Django, no signal, no invalidation."""
    with (
        outside_client() as outside,
        outside.transaction(),
    ):  # BEGIN ... COMMIT, with another statement
        # No trigger of ours fires for this session: whatever records changes
        # in the database, this write stays unrecorded (the watcher's case).
        outside.execute("SET LOCAL session_replication_role = replica")
        outside.execute(
            f"UPDATE {m.Persona._meta.db_table} SET name = %s WHERE id = %s",
            [name, persona_id],
        )


async def served_names(server: int) -> list[str]:
    return [p.name for p in await tomori_state.get_cached_all_personas(server)]


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name == "caches.consistency"
    ]


async def past_the_bound(
    watcher: ConsistencyWatcher, clock: FakeClock, key: Any
) -> None:
    """Check `key` as a suspect, then let the watcher's own turn confirm it."""
    await watcher.check_key(registry.entry("tomori_state"), key)
    clock.advance(BOUND + 0.1)
    assert await watcher.check_next()  # the due suspect comes first


async def test_an_outside_write_is_repaired_and_counted_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(start=100.0)
    watcher = ConsistencyWatcher(
        registry, checks_per_second=10, bound_seconds=BOUND, clock=clock
    )
    entry = registry.entry("tomori_state")
    server, persona = await guild("before")
    assert await served_names(server) == ["before"]

    await asyncio.to_thread(_outside_rename, persona, "after")
    assert await served_names(server) == ["before"]  # nothing told the worker
    stale = entry.cache.peek(server)  # type: ignore[attr-defined]
    await past_the_bound(watcher, clock, server)

    figures = watcher.summary()["tomori_state"]
    assert (figures["inconsistent"], figures["repairs"], figures["checked"]) == (
        1,
        1,
        1,
    )
    assert entry.cache.peek(server) is MISSING  # type: ignore[attr-defined]
    [line] = errors(caplog)
    assert f"tomori_state[{server}] differs from the database" in line
    assert "dropped it from this worker's cache" in line

    # A stale fill races the drop: still inconsistent, the same episode.
    getattr(entry.cache, "primary", entry.cache).set(server, stale)
    await past_the_bound(watcher, clock, server)
    assert entry.cache.peek(server) is MISSING  # type: ignore[attr-defined]
    assert watcher.summary()["tomori_state"] == figures  # not counted again
    assert len(errors(caplog)) == 1  # nor logged again

    assert await served_names(server) == ["after"]  # the next read reloads
    await watcher.check_key(entry, server)
    figures = watcher.summary()["tomori_state"]
    assert (figures["inconsistent"], figures["repairs"], figures["checked"]) == (
        1,
        1,
        2,
    )
    assert not watcher.caches["tomori_state"].episodes  # the episode is over
