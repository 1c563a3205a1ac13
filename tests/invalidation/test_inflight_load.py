"""A write that commits while a load is in flight keeps the old row out of the cache."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from caches import bus
from caches.core import MISSING
from tests.invalidation.conftest import load_tomori_state
from tomori import models as m

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
]


def _rename(persona_id: int, name: str) -> None:
    persona = m.Persona.objects.get(pk=persona_id)
    persona.name = name
    persona.save()


async def test_invalidation_during_an_inflight_load_is_not_cached(caches, world):
    server = await sync_to_async(world.server)()
    persona = await sync_to_async(world.persona)(server, name="old")
    key = server.server_disc_id
    # Invalidations are applied on this loop's thread, as in the bot worker.
    bus.start_subscriber(loop=asyncio.get_running_loop())
    cache = caches.caches["tomori_state"]
    read_done, may_store = asyncio.Event(), asyncio.Event()

    async def loader():
        value = await sync_to_async(load_tomori_state)(key)
        read_done.set()
        await may_store.wait()  # the write commits between the read and the store
        return value

    load = asyncio.create_task(cache.get_or_load(key, loader))
    await read_done.wait()
    await sync_to_async(_rename)(persona.id, "new")
    may_store.set()

    assert (await load)[4][0][1] == "old"  # its waiters get what it read
    assert cache.get(key) is MISSING  # but the old row is not cached
    fresh = await cache.get_or_load(key, lambda: sync_to_async(load_tomori_state)(key))
    assert fresh[4][0][1] == "new"
