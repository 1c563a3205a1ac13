"""Invalidations reach another process: a real second process writes, this one stops serving the old value."""

from __future__ import annotations

import pytest

from caches import bus
from caches.core import MISSING
from tests.invalidation.conftest import run_in_another_process

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
    pytest.mark.e2e,
]

WAIT = 30.0


def _rename_persona(persona_id: int, name: str) -> str:
    return (
        "from tomori.models import Persona\n"
        f"p = Persona.objects.get(pk={persona_id})\n"
        f"p.name = {name!r}\n"
        "p.save()\n"
    )


def _subscribe(redis_url: str, channel: str) -> bus.Bus:
    here = bus.configure(redis_url=redis_url, channel=channel)
    here.start_subscriber()
    assert here.stats.wait_for(lambda s: s["flushes"] >= 1, WAIT)
    return here


def test_a_save_in_another_process_invalidates_this_one(
    caches, world, redis_url, bus_channel
):
    server = world.server()
    persona = world.persona(server, name="old")
    here = _subscribe(redis_url, bus_channel)
    assert caches.read("tomori_state", server.server_disc_id)[4][0][1] == "old"

    run_in_another_process(
        _rename_persona(persona.id, "new"), redis_url=redis_url, channel=bus_channel
    )

    assert here.stats.wait_for(lambda s: s["applied"] >= 1, WAIT)
    assert caches.cached("tomori_state", server.server_disc_id) is MISSING
    assert caches.read("tomori_state", server.server_disc_id)[4][0][1] == "new"
    assert here.snapshot()["lag"]["count"] >= 1


def test_a_write_during_an_outage_is_not_served_stale_after_reconnect(
    caches, world, redis_url, bus_channel, redis_proxy
):
    proxy, proxied_url = redis_proxy
    server = world.server()
    persona = world.persona(server, name="before outage")
    here = _subscribe(proxied_url, bus_channel)
    old = caches.read("tomori_state", server.server_disc_id)

    proxy.down()
    assert here.stats.wait_for(lambda s: not s["connected"], WAIT)
    # The other process publishes straight to Redis; this subscriber misses it.
    run_in_another_process(
        _rename_persona(persona.id, "during outage"),
        redis_url=redis_url,
        channel=bus_channel,
    )
    # Cut off, this process cannot know yet; the reconnect is what heals it.
    assert caches.cached("tomori_state", server.server_disc_id) is old
    proxy.up()

    assert here.stats.wait_for(lambda s: s["connected"] and s["flushes"] >= 2, WAIT)
    assert here.snapshot()["applied"] == 0  # the message itself was lost
    state = caches.read("tomori_state", server.server_disc_id)
    assert state[4][0][1] == "during outage"
    assert caches.stale() == []
