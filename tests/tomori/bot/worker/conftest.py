"""Run `manage.py runbot` as a real process against the test database."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.support.processes import WatchedProcess
from tomori.bot.simulator import SimulatedDiscord
from tomori.bot.simulator.payloads import Payload

ROOT = Path(__file__).resolve().parents[4]


def test_database_url() -> str:
    """Return a DATABASE_URL naming the database this test run uses."""
    params = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{params['NAME']}"
    user = params["USER"] or "postgres"
    return f"postgres://{user}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}/{params['NAME']}"


class BotProcess(WatchedProcess):
    """A runbot subprocess on the test database, whose output lines can be awaited."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        full_env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
            "DATABASE_URL": test_database_url(),
            "PYTHONUNBUFFERED": "1",
            # A short shard-lock TTL: a worker connects half a TTL after taking it.
            "SHARD_LOCK_TTL_SECONDS": "4",
            **(env or {}),
        }
        super().__init__(
            [sys.executable, "manage.py", "runbot", *args], env=full_env, cwd=ROOT
        )


@pytest.fixture
def run_bot() -> Iterator[type[BotProcess]]:
    """Start runbot processes; kill any still running at the end of the test."""
    started: list[BotProcess] = []

    class Tracked(BotProcess):
        def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
            super().__init__(*args, env=env)
            started.append(self)

    yield Tracked
    for bot in started:
        bot.stop()


def free_port() -> int:
    """Return a loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def simulator_process(scenario: str, *, traffic: float) -> Iterator[str]:
    """Serve the simulated Discord from its own process, sending `traffic` msg/s once
    a bot identifies; yield its http://host:port (what --simulator-url takes)."""
    port = free_port()
    simulator = subprocess.Popen(
        [sys.executable, "-m", "tomori.bot.simulator", "--scenario", scenario]
        + ["--port", str(port), "--traffic", str(traffic)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert simulator.stdout is not None
        assert "REST base:" in simulator.stdout.readline() + simulator.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        simulator.terminate()
        simulator.wait(10)


class ThreadedSimulator:
    """The simulated Discord on a loop of its own thread in the test process.

    A runbot pointed at it (`--simulator-url`) gets its traffic; the test can
    hold the answers to the messages the bot posts (a reply in flight, as
    long as the test likes) where a simulator process could not.
    """

    def __init__(self, scenario: str) -> None:
        self.sim = SimulatedDiscord(scenario)
        self.held = 0  # replies held so far
        self.first_held = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._release: asyncio.Event | None = None
        self._traffic: Future[Any] | None = None

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> str:
        """Serve; return the http://host:port that --simulator-url takes."""
        self._thread.start()
        self._call(self.sim.start())
        return f"http://127.0.0.1:{self.sim.port}"

    def send_traffic(self, rate: float) -> None:
        """Send the scenario's traffic at `rate` msg/s once a bot has identified."""

        async def traffic() -> None:
            await self.sim.wait_for_identify(1)
            await self.sim.run_traffic(rate)

        self._traffic = asyncio.run_coroutine_threadsafe(traffic(), self._loop)

    def hold_replies(self) -> None:
        """Answer no message the bot posts until `release_replies()`."""
        self._call(self._hold())

    async def _hold(self) -> None:
        release = self._release = asyncio.Event()
        echo = self.sim.echo

        async def held_echo(guild_id: int, message: Payload) -> None:
            self.held += 1
            self.first_held.set()
            await release.wait()  # the REST answer waits with it
            await echo(guild_id, message)

        self.sim.echo = held_echo  # type: ignore[method-assign]

    def release_replies(self) -> None:
        """Answer the held replies (and every later one at once)."""
        release = self._release
        if release is not None:
            self._loop.call_soon_threadsafe(release.set)

    def stop(self) -> None:
        """Stop the traffic and the server, then the loop."""
        if self._traffic is not None:
            self._traffic.cancel()
        self.release_replies()
        self._call(self.sim.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


@pytest.fixture
def threaded_simulator() -> Iterator[type[ThreadedSimulator]]:
    """Start ThreadedSimulators (call `.start()`); stop each at the end of the test."""
    started: list[ThreadedSimulator] = []

    class Tracked(ThreadedSimulator):
        def start(self) -> str:
            started.append(self)
            return super().start()

    yield Tracked
    for simulator in started:
        simulator.stop()
