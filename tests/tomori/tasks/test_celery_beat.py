"""Celery beat, as a real subprocess: it logs its schedule and refuses a bad setting by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from tests.support.faults import wait_until

ROOT = Path(__file__).resolve().parents[3] / "."
DUE_PREFIX = "Scheduler: Sending due task"
DUE = f"{DUE_PREFIX} beat-test-tick (tomori.beat_test_tick)"


def _beat(tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tomori",
            "beat",
            "-l",
            "info",
            "-s",
            str(tmp_path / "beat-schedule"),
            "--pidfile=",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.tomori.tasks.beat_settings",
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


class LineWaiter:
    """Read a process's output on a thread; wait for a line containing some text."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, text: str, *, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: any(text in line for line in self.lines), timeout=timeout
            )


@pytest.fixture
def beat_queue(redis_url: str) -> Iterator[str]:
    """A private queue for the beat test's messages, deleted afterwards."""
    queue = f"tomori-beat-test-{uuid.uuid4().hex}"
    yield queue
    client = redis.Redis.from_url(redis_url)
    client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    client.close()


def test_beat_logs_its_due_tasks_at_info(
    tmp_path: Path, redis_url: str, beat_queue: str
) -> None:
    proc = _beat(tmp_path, REDIS_URL=redis_url, TOMORI_BEAT_TEST_QUEUE=beat_queue)
    output = LineWaiter(proc)
    client = redis.Redis.from_url(redis_url)
    try:
        assert output.wait_for(DUE, timeout=60), "\n".join(output.lines)
        assert any("beat: Starting..." in line for line in output.lines)
        # What it logged, it sent (the publish follows the log line).
        assert wait_until(lambda: client.llen(beat_queue) >= 1, timeout=10)
    finally:
        proc.terminate()
        proc.wait(15)
        client.close()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"TOMORI_STATE_CACHE_TTL_MINUTES": "abc"},
            "TOMORI_STATE_CACHE_TTL_MINUTES='abc'",
        ),
        ({"OPENROUTER_BASE_URL": "abc"}, "OPENROUTER_BASE_URL='abc'"),
        ({"DEBUG": "maybe"}, "DEBUG='maybe'"),
    ],
)
def test_beat_names_a_bad_setting_and_exits_non_zero(
    tmp_path: Path, redis_url: str, env: dict[str, str], named: str
) -> None:
    proc = _beat(tmp_path, REDIS_URL=redis_url, **env)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert named in output
    assert DUE not in output


def test_beat_sends_the_catalog_refresh_once_soon_after_it_starts(
    tmp_path: Path, redis_url: str, beat_queue: str
) -> None:
    started = datetime.now(UTC)
    proc = _beat(
        tmp_path,
        REDIS_URL=redis_url,
        TOMORI_BEAT_TEST_QUEUE=beat_queue,
        DJANGO_SETTINGS_MODULE="tests.tomori.tasks.beat_at_start_settings",
    )
    output = LineWaiter(proc)
    client = redis.Redis.from_url(redis_url)
    sent = (
        "Scheduler: refresh-openrouter-catalogs (caches.refresh_openrouter_catalogs) "
        "sent to run once 30 s after start, then every 3600 s"
    )
    try:
        assert output.wait_for(sent, timeout=60), "\n".join(output.lines)
        assert wait_until(lambda: client.llen(beat_queue) >= 1, timeout=10)
        [message] = [json.loads(m) for m in client.lrange(beat_queue, 0, -1)]
        headers = message["headers"]
        assert headers["task"] == "caches.refresh_openrouter_catalogs"
        eta = datetime.fromisoformat(headers["eta"]) - started
        assert timedelta(seconds=25) <= eta <= timedelta(seconds=60), eta
        assert not any(DUE_PREFIX in line for line in output.lines)  # an hour away
    finally:
        proc.terminate()
        proc.wait(15)
        client.close()


def test_the_settings_refresh_the_catalogs_at_beat_start_and_on_schedule() -> None:
    from django.conf import settings

    delay = settings.TOMORI_BEAT_AT_START["refresh-openrouter-catalogs"]
    assert 0 < delay <= 60
    entry = settings.CELERY_BEAT_SCHEDULE["refresh-openrouter-catalogs"]
    assert entry["task"] == "caches.refresh_openrouter_catalogs"
    assert entry["schedule"] >= 60  # the periodic refresh stays
