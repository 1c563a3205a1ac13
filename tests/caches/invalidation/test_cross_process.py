"""Invalidations reach another process: a real second process writes, this one's real layer stops serving the old value."""

from __future__ import annotations

import pytest

from caches import bus
from tests.caches.invalidation import probes
from tests.caches.invalidation.conftest import run_in_another_process

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
    pytest.mark.e2e,
]

WAIT = 30.0


def _rename_persona(persona_id: int, name: str) -> str:
    return (
        "from tomori.domain.models import Persona\n"
        f"p = Persona.objects.get(pk={persona_id})\n"
        f"p.name = {name!r}\n"
        "p.save()\n"
    )


def _subscribe(redis_url: str, channel: str) -> bus.Bus:
    here = bus.configure(redis_url=redis_url, channel=channel)
    here.start_subscriber()
    assert here.stats.wait_for(lambda s: s["flushes"] >= 1, WAIT)
    return here


def _names(state) -> list[str]:  # type: ignore[no-untyped-def]
    return [p.name for p in state.personas]


def test_a_save_in_another_process_invalidates_this_one(
    layers, world, redis_url, bus_channel
):
    server = world.server()
    persona = world.persona(server, name="old")
    here = _subscribe(redis_url, bus_channel)
    state = probes.state(server)
    assert _names(layers.warm(state)[0]) == ["main", "old"]

    run_in_another_process(
        _rename_persona(persona.id, "new"), redis_url=redis_url, channel=bus_channel
    )

    assert here.stats.wait_for(lambda s: s["applied"] >= 1, WAIT)
    assert _names(layers.read(state)) == ["main", "new"]
    assert here.snapshot()["lag"]["count"] >= 1


def test_a_blacklisting_in_another_process_reaches_this_ones_user_layer(
    layers, world, redis_url, bus_channel
):
    # The blacklist answers are keyed (user, server) in the layer while the
    # operation takes (server, user): the event must reach the real key.
    server, user = world.server(), world.user()
    here = _subscribe(redis_url, bus_channel)
    listed = probes.blacklisted(server, user)
    assert layers.warm(listed) == [False]

    run_in_another_process(
        "from tomori.domain.models import UserBlacklist\n"
        f"UserBlacklist.objects.create(server_id={server.pk}, user_id={user.pk})\n",
        redis_url=redis_url,
        channel=bus_channel,
    )

    assert here.stats.wait_for(lambda s: s["applied"] >= 1, WAIT)
    assert layers.read(listed) is True


def test_a_write_during_an_outage_is_not_served_stale_after_reconnect(
    layers, world, redis_url, bus_channel, redis_proxy, django_assert_num_queries
):
    proxy, proxied_url = redis_proxy
    server = world.server()
    persona = world.persona(server, name="before outage")
    here = _subscribe(proxied_url, bus_channel)
    state = probes.state(server)
    layers.warm(state)

    proxy.down()
    assert here.stats.wait_for(lambda s: not s["connected"], WAIT)
    # The other process publishes straight to Redis; this subscriber misses it.
    run_in_another_process(
        _rename_persona(persona.id, "during outage"),
        redis_url=redis_url,
        channel=bus_channel,
    )
    # Cut off, this process cannot know yet; the reconnect is what heals it.
    with django_assert_num_queries(0):
        assert _names(layers.read(state)) == ["main", "before outage"]
    proxy.up()

    assert here.stats.wait_for(lambda s: s["connected"] and s["flushes"] >= 2, WAIT)
    assert here.snapshot()["applied"] == 0  # the message itself was lost
    assert _names(layers.read(state)) == ["main", "during outage"]
