"""A writer that commits and exits at once publishes its invalidations or says it left them to the outbox."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from caches.bus.publisher import RedisPublisher
from caches.bus.stats import BusStats
from caches.messages import InvalidationBatch
from tests.caches.invalidation.conftest import ROOT
from tests.support.faults import wait_until

WRITERS = 50
#: Writers running at the same time (each one still commits and exits alone).
AT_ONCE = 5
WAIT = 10.0
LEFT_TO_OUTBOX = re.compile(r"exiting with (\d+) unpublished invalidation")


class Listener:
    """A plain Redis subscriber on one channel: the origins of the batches it heard."""

    def __init__(self, url: str, channel: str) -> None:
        self.origins: list[str] = []
        self._cond = threading.Condition()
        self._pubsub = redis.Redis.from_url(url).pubsub()
        self._pubsub.subscribe(**{channel: self._handle})
        deadline = time.monotonic() + WAIT
        while self._pubsub.get_message(timeout=0.1) is None:  # the confirmation
            assert time.monotonic() < deadline, "no subscription confirmation"
        self._thread = self._pubsub.run_in_thread(sleep_time=0.05, daemon=True)

    def _handle(self, message: dict) -> None:  # type: ignore[type-arg]
        body = json.loads(message["data"])
        if body.get("kind") == "invalidate":
            with self._cond:
                self.origins.append(body["origin"])
                self._cond.notify_all()

    def wait_for(self, predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
        """Block until `predicate(origins)` holds or `timeout` passes; return which."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.origins), timeout)

    def stop(self) -> None:
        self._thread.stop()
        self._thread.join(5)
        self._pubsub.close()


@pytest.fixture
def listener(redis_url: str, bus_channel: str) -> Iterator[Listener]:
    """Subscribe to `bus_channel` (confirmed) before any writer runs."""
    heard = Listener(redis_url, bus_channel)
    yield heard
    heard.stop()


def _published_by(pid: int, origins: list[str]) -> bool:
    return any(re.search(rf"(^|:){pid}(:|$)", origin) for origin in origins)


def _run_writers(
    persona_id: int, out_dir: Path, redis_url: str, channel: str
) -> list[int]:
    from django.db import connection

    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": redis_url,
        "TOMORI_BUS_CHANNEL": channel,
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.caches.invalidation.writer_fleet",
            str(persona_id),
            str(WRITERS),
            str(out_dir),
            str(AT_ONCE),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [line.split() for line in done.stdout.splitlines()]
    assert [code for _, code in runs] == ["0"] * WRITERS, done.stdout
    return [int(pid) for pid, _ in runs]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("postgres")
@pytest.mark.e2e
def test_every_short_lived_writer_publishes_or_says_what_it_left_to_the_outbox(
    world, redis_url, bus_channel, listener, tmp_path
) -> None:
    from tomori.domain.models import Persona

    persona = world.persona(world.server(), name="before")
    pids = _run_writers(persona.id, tmp_path, redis_url, bus_channel)

    assert Persona.objects.get(pk=persona.id).name.startswith("short-lived ")
    announced = {
        pid
        for pid in pids
        if LEFT_TO_OUTBOX.search((tmp_path / f"{pid}.log").read_text())
    }
    listener.wait_for(
        lambda origins: all(
            pid in announced or _published_by(pid, origins) for pid in pids
        ),
        WAIT,
    )
    published = {pid for pid in pids if _published_by(pid, listener.origins)}
    silent = [pid for pid in pids if pid not in published | announced]
    assert silent == [], (
        f"{len(silent)} of {WRITERS} writers neither published nor said so "
        f"({len(published)} published, {len(announced)} left to the outbox)"
    )


# ------------------------------------------------------------------ the exit hook


def _paused_publisher(own_redis) -> RedisPublisher:  # type: ignore[no-untyped-def]
    """Return a publisher whose one message the sender took and cannot publish yet."""
    publisher = RedisPublisher(own_redis.url, "tomori:test:exit", BusStats())
    assert publisher.client.ping()  # connected while Redis answers
    own_redis.pause()
    publisher.publish_later(
        lambda seq: InvalidationBatch(origin="exiting", seq=seq, sent_at=time.time())
    )
    # Off the backlog, in the sender's hands: the gap the exit hook once missed.
    assert wait_until(lambda: publisher.backlog == 0, timeout=WAIT)
    assert publisher.unpublished == 1
    return publisher


def test_the_exit_hook_names_the_message_in_flight_when_redis_does_not_take_it(
    own_redis, caplog
) -> None:
    publisher = _paused_publisher(own_redis)
    try:
        started = time.monotonic()
        publisher._drain_at_exit(0.3)
        waited = time.monotonic() - started
    finally:
        own_redis.resume()
        publisher.close(drain_timeout=WAIT)
    assert waited >= 0.3  # it waited for the sender, as long as it may
    assert "exiting with 1 unpublished invalidation message(s)" in caplog.text


def test_the_exit_hook_waits_for_the_message_in_flight(own_redis, caplog) -> None:
    publisher = _paused_publisher(own_redis)
    try:
        own_redis.resume()  # the publish in flight is answered now
        publisher._drain_at_exit(WAIT)
        assert publisher.unpublished == 0
        assert publisher._stats.snapshot()["published"] == 1
    finally:
        publisher.close(drain_timeout=WAIT)
    assert "unpublished" not in caplog.text
