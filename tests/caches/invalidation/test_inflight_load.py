"""A write that commits while a load is in flight keeps the old row out of the real layer."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from caches import bus
from caches.layers import tomori_state
from tomori.domain import models as m
from tomori.domain.repositories import servers as servers_repo

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
]

WAIT = 30.0


def _rename(persona_id: int, name: str) -> None:
    persona = m.Persona.objects.get(pk=persona_id)
    persona.name = name
    persona.save()


def _names(state: tomori_state.TomoriState | None) -> list[str]:
    assert state is not None
    return [p.name for p in state.personas]


async def test_invalidation_during_an_inflight_load_is_not_cached(
    layers, world, monkeypatch
):
    server = await sync_to_async(world.server)()
    persona = await sync_to_async(world.persona)(server, name="old")
    key = server.server_disc_id
    # Invalidations are applied on this loop's thread, as in the bot worker.
    bus.start_subscriber(loop=asyncio.get_running_loop())
    read_done, may_store = threading.Event(), threading.Event()
    read_rows = servers_repo.load_tomori_state_rows

    def gated_read(server_disc_id: int) -> servers_repo.TomoriStateRows | None:
        rows = read_rows(server_disc_id)  # the real read, then a pause
        read_done.set()
        may_store.wait(WAIT)  # the write commits between the read and the store
        return rows

    monkeypatch.setattr(servers_repo, "load_tomori_state_rows", gated_read)
    load = asyncio.create_task(tomori_state.get_cached_tomori_state(key))
    assert await asyncio.to_thread(read_done.wait, WAIT)
    # Another thread (its own connection) commits while the layer's database
    # thread is held.
    await sync_to_async(_rename, thread_sensitive=False)(persona.id, "new")
    may_store.set()

    assert _names(await load) == ["main", "old"]  # its waiters get what it read
    # But the old row was not cached: the next read loads the new one.
    assert _names(await tomori_state.get_cached_tomori_state(key)) == ["main", "new"]
