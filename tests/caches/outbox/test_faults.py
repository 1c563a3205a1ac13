"""No invalidation is lost once its write committed: writers cut off or killed, Redis paused or restarted.

This process plays the bot worker: its bus follows the outbox and applies to
the real registry. Writers are real `manage.py shell` processes. Redis is a
server of the test's own, which it kills, restarts and pauses.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync

from caches import bus
from caches.core import MISSING
from caches.layers import tomori_state
from caches.registry import registry
from tests.caches.invalidation.conftest import run_in_another_process
from tests.support.faults import wait_until
from tomori.domain import models as m

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
    pytest.mark.e2e,
]

WAIT = 20.0
UNREACHABLE = "redis://127.0.0.1:1/0"


@pytest.fixture
def channel() -> str:
    return f"tomori:test:{uuid.uuid4().hex}"


#: A follower that polls only when woken (at start, on a lost subscription, on
#: reconnection, or by the test): which path applied a write is then no race.
WOKEN_ONLY = 3600.0


def worker_bus(
    redis_url: str, channel: str, *, poll_every: float | None = None
) -> bus.Bus:
    options = bus.outbox_options()
    if poll_every is not None:
        options = options._replace(interval=poll_every)
    here = bus.configure(redis_url=redis_url, channel=channel, worker_id="w")
    here.start_subscriber(outbox=options)
    if redis_url:
        assert here.stats.wait_for(lambda s: s["connected"], WAIT)
    assert wait_until(
        lambda: here.snapshot()["outbox"]["applied_through"] is not None, timeout=WAIT
    )
    return here


@pytest.fixture
def stop_bus() -> Iterator[None]:
    yield
    bus.configure(redis_url="", channel="tomori:test:idle")


def guild(name: str) -> tuple[m.Server, m.Persona]:
    server = m.Server.objects.create(server_disc_id=10**17 + uuid.uuid4().int % 10**15)
    return server, m.Persona.objects.create(server=server, name=name, is_main=True)


def served_names(server: m.Server) -> list[str]:
    found = async_to_sync(tomori_state.get_cached_all_personas)(server.server_disc_id)
    return [p.name for p in found]


def is_cached(server: m.Server) -> bool:
    return registry.get("tomori_state").peek(server.server_disc_id) is not MISSING


def rename(persona: m.Persona, name: str, *, kill_after_commit: bool = False) -> str:
    code = (
        "import os\n"
        "from django.db import transaction\n"
        "from tomori.domain.models import Persona\n"
        "with transaction.atomic():\n"
        f"    p = Persona.objects.get(pk={persona.pk})\n"
        f"    p.name = {name!r}\n"
        "    p.save()\n"
    )
    if kill_after_commit:
        # Registered first, so it runs before the invalidation is dispatched.
        code = code.replace(
            "with transaction.atomic():\n",
            "with transaction.atomic():\n"
            "    transaction.on_commit(lambda: os.kill(os.getpid(), 9))\n",
        )
    return code


def assert_caught_up(here: bus.Bus, server: m.Server, name: str) -> None:
    assert wait_until(lambda: not is_cached(server), timeout=WAIT)
    assert served_names(server) == [name]
    assert here.snapshot()["outbox_caught_up"] >= 1


def test_a_writer_cut_off_from_redis_still_invalidates(own_redis, channel, stop_bus):
    server, persona = guild("before")
    here = worker_bus(own_redis.url, channel)
    assert served_names(server) == ["before"] and is_cached(server)

    run_in_another_process(
        rename(persona, "after"), redis_url=UNREACHABLE, channel=channel
    )

    assert_caught_up(here, server, "after")


def test_a_writer_killed_right_after_its_commit_still_invalidates(
    own_redis, channel, stop_bus
):
    server, persona = guild("before")
    here = worker_bus(own_redis.url, channel)
    served_names(server)

    run_in_another_process(
        rename(persona, "after", kill_after_commit=True),
        redis_url=own_redis.url,
        channel=channel,
        returncode=-9,
    )

    assert_caught_up(here, server, "after")
    assert here.snapshot()["applied"] == 1  # by the outbox alone


def test_a_paused_redis_is_noticed_and_its_writes_still_arrive(
    own_redis, channel, stop_bus
):
    server, persona = guild("before")
    here = worker_bus(own_redis.url, channel)
    served_names(server)

    own_redis.pause()
    try:
        assert here.stats.wait_for(lambda s: not s["connected"], WAIT)
        run_in_another_process(
            rename(persona, "after"), redis_url=own_redis.url, channel=channel
        )
        assert_caught_up(here, server, "after")
    finally:
        own_redis.resume()
    assert here.stats.wait_for(lambda s: s["connected"], WAIT)
    assert here.snapshot()["disconnects"] >= 1


def test_a_restarted_redis_loses_nothing(own_redis, channel, stop_bus):
    server, persona = guild("before")
    # Woken polls only: a timed poll landing between the last write's commit
    # and its bus message would apply it first, and the fast path would look
    # unused (a race this test once lost under load).
    here = worker_bus(own_redis.url, channel, poll_every=WOKEN_ONLY)
    served_names(server)

    own_redis.kill()
    assert here.stats.wait_for(lambda s: not s["connected"], WAIT)
    run_in_another_process(
        rename(persona, "during"), redis_url=own_redis.url, channel=channel
    )
    own_redis.start()

    assert_caught_up(here, server, "during")
    assert here.stats.wait_for(lambda s: s["connected"], WAIT)
    # Back on the fast path once reconnected: the bus applies the next write,
    # and the poll that follows finds it applied already.
    caught_up = here.snapshot()["outbox_caught_up"]
    applied = here.snapshot()["applied"]
    run_in_another_process(
        rename(persona, "after"), redis_url=own_redis.url, channel=channel
    )
    assert here.stats.wait_for(lambda s: s["applied"] > applied, WAIT)
    assert wait_until(
        lambda: not is_cached(server) or served_names(server) == ["after"], timeout=WAIT
    )
    assert here.applier.catch_up is not None
    here.applier.catch_up()  # the follower's next poll
    assert here.stats.wait_for(lambda s: s["outbox_skipped"] >= 1, WAIT)
    assert here.snapshot()["outbox_caught_up"] == caught_up


def test_without_redis_a_second_process_reaches_the_worker(channel, stop_bus):
    server, persona = guild("before")
    here = worker_bus("", channel)
    served_names(server)

    run_in_another_process(rename(persona, "after"), redis_url="", channel=channel)

    assert_caught_up(here, server, "after")
