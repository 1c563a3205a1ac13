"""Invalidations name their origin (the kind of process and the process); a process without caches applies none."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from caches import bus, process_identity
from caches.models import InvalidationOutbox
from caches.registry import registry
from tests.caches.invalidation.conftest import run_in_another_process

WAIT = 30.0


@pytest.fixture
def restored_identity() -> Iterator[None]:
    saved = process_identity._current
    yield
    process_identity._current = saved


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("postgres")
@pytest.mark.e2e
def test_a_shell_save_is_logged_as_from_manage_py_and_its_process(
    world, redis_url, bus_channel, caplog
):
    caplog.set_level(logging.INFO, logger="caches.bus.applier")
    persona = world.persona(world.server(), name="old")
    here = bus.configure(redis_url=redis_url, channel=bus_channel)
    here.start_subscriber()
    assert here.stats.wait_for(lambda s: s["flushes"] >= 1, WAIT)

    pid = run_in_another_process(
        f"import os\n"
        f"from tomori.domain.models import Persona\n"
        f"p = Persona.objects.get(pk={persona.id})\n"
        f"p.name = 'new'\n"
        f"p.save()\n"
        f"print(os.getpid())\n",
        redis_url=redis_url,
        channel=bus_channel,
    ).split()[-1]

    assert here.stats.wait_for(lambda s: s["applied"] >= 1, WAIT)
    origin = rf"manage\.py-shell:[^:\s]+:{pid}:[0-9a-f]{{6}}"
    assert re.search(rf"invalidated from {origin}: ", caplog.text), caplog.text
    row = InvalidationOutbox.objects.latest("id")
    assert re.fullmatch(origin, row.origin), row.origin  # the same origin


@pytest.mark.usefixtures("restored_identity")
def test_a_process_without_caches_publishes_but_applies_nothing_here(
    redis_url, bus_channel
):
    process_identity.set_kind("admin-web")
    registry.get("user").set(5, None)  # type: ignore[attr-defined]
    admin = bus.Bus(redis_url=redis_url, channel=bus_channel)
    try:
        admin.broadcast([("user", "key", (5,))])
        assert admin._publisher is not None and admin._publisher.drain(WAIT)
        stats = admin.snapshot()
    finally:
        admin.close()
    assert stats["local"] == 0 and stats["published"] == 1
    assert 5 in registry.get("user")  # this process's registry was left alone


def test_a_process_with_caches_applies_its_own_commits(local_bus: bus.Bus) -> None:
    registry.get("user").set(5, None)  # type: ignore[attr-defined]
    local_bus.broadcast([("user", "key", (5,))])
    assert local_bus.snapshot()["local"] == 1
    assert 5 not in registry.get("user")
