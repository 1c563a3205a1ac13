"""Fixtures for the invalidation tests: reads through the real layers, rows, processes.

Every test reads through the layers the registry holds (`caches/layers/*`)
with their public getters, writes, and reads again: what it asserts is what
the bot would be served.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from asgiref.sync import async_to_sync

from caches import bus
from caches.database import close_thread_connections
from caches.layers import layer_of, load_all
from caches.registry import registry
from tests.support.processes import run_python
from tomori.domain import models as m


@dataclass(frozen=True)
class Probe:
    """One read through a real layer's public getter: `getter(*args, **kwargs)`."""

    layer: str
    getter: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        return f"{self.layer}:{self.getter.__name__}{self.args}"


def probe(getter: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Probe:
    """Return the probe `getter(*args, **kwargs)` of the layer `getter` reads.

    The layer is the one the getter belongs to (`caches.layers.layer_of`); a
    getter of no registered layer is an error, never skipped.
    """
    layer = layer_of(getter).name
    registry.entry(layer)
    return Probe(layer, getter, args, tuple(sorted(kwargs.items())))


class Layers:
    """Reads through the real, registered layers from a sync test.

    `async_to_sync` sends each layer's database calls back to the test's
    thread, so they run in its transaction and `django_assert_num_queries`
    sees them.
    """

    def __init__(self, assert_num_queries: Callable[..., Any]) -> None:
        self._assert_num_queries = assert_num_queries

    def read(self, p: Probe) -> Any:
        """Return what the layer serves for `p` (a hit, or a load on a miss)."""
        return self.read_all([p])[0]

    def read_all(self, probes: Iterable[Probe]) -> list[Any]:
        """Return what the layers serve for each probe, in order, in one event loop."""
        return async_to_sync(_read_in_turn)(list(probes))

    def warm(self, *probes: Probe) -> list[Any]:
        """Read each probe, then prove the second read is a hit (no query)."""
        values = self.read_all(probes)
        with self._assert_num_queries(0):
            again = self.read_all(probes)
        assert again == values
        return values

    def fresh(self, p: Probe) -> Any:
        """Return what the database says now: the layer emptied, then read."""
        registry.clear(p.layer)
        return self.read(p)

    def stale(self, *probes: Probe) -> list[tuple[str, Any, Any]]:
        """Return every probe whose served value differs from the database's.

        Serves every probe first, then empties their layers and reads them
        again: afterwards every probe is warm with the database's value.
        """
        served = self.read_all(probes)
        for layer in {p.layer for p in probes}:
            registry.clear(layer)
        truth = self.read_all(probes)
        return [
            (str(p), was, now)
            for p, was, now in zip(probes, served, truth, strict=True)
            if was != now
        ]


async def _read_in_turn(probes: list[Probe]) -> list[Any]:
    return [await p.getter(*p.args, **dict(p.kwargs)) for p in probes]


@pytest.fixture(scope="session", autouse=True)
def real_layers() -> None:
    """Import every layer so the registry holds all of them."""
    load_all()


@pytest.fixture
def layers(django_assert_num_queries: Callable[..., Any]) -> Iterator[Layers]:
    """Return the reader over the real layers; every layer starts and ends empty."""
    registry.clear_all()
    yield Layers(django_assert_num_queries)
    registry.clear_all()
    # Async reads in transactional tests query from the database threads
    # too; close their connections so the test database can be dropped.
    close_thread_connections()


@pytest.fixture(autouse=True)
def local_bus() -> Iterator[bus.Bus]:
    """Give each test an in-process bus (no Redis traffic unless a test asks)."""
    local = bus.configure(redis_url="", channel="tomori:test:local")
    yield local
    bus.configure(redis_url="", channel="tomori:test:local").close()


@pytest.fixture
def bus_channel() -> str:
    """Return a Redis channel no other test run publishes on."""
    return f"tomori:test:{uuid.uuid4().hex}"


# --------------------------------------------------------------- rows


class World:
    """Factories for the rows the tests write (ids unique across the test session)."""

    _ids = itertools.count(1000)

    def next_id(self) -> int:
        return next(self._ids)

    def server(self, *, main: str | None = "main", **fields: Any) -> m.Server:
        """Create a server with a main persona named `main` (None: no persona).

        The real tomori_state layer caches only a server that has a main persona.
        """
        fields.setdefault("server_disc_id", 10**17 + self.next_id())
        server = m.Server.objects.create(**fields)
        if main is not None:
            self.persona(server, name=main, is_main=True)
        return server

    def persona(self, server: m.Server, **fields: Any) -> m.Persona:
        fields.setdefault("name", f"persona-{self.next_id()}")
        return m.Persona.objects.create(server=server, **fields)

    def user(self, **fields: Any) -> m.User:
        fields.setdefault("user_disc_id", 2 * 10**17 + self.next_id())
        fields.setdefault("username", f"user-{self.next_id()}")
        return m.User.objects.create(**fields)

    def llm(self, **fields: Any) -> m.Llm:
        fields.setdefault("provider", "openrouter")
        fields.setdefault("codename", f"model-{self.next_id()}")
        return m.Llm.objects.create(**fields)


@pytest.fixture
def world() -> World:
    """Return row factories (call them inside a test that has database access)."""
    return World()


@pytest.fixture
def commit(django_capture_on_commit_callbacks: Any) -> Callable[[], Any]:
    """Return a context manager that runs the on-commit callbacks of its block."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


# --------------------------------------------------------------- processes

ROOT = Path(__file__).resolve().parents[3]


def run_in_another_process(
    code: str, *, redis_url: str, channel: str, returncode: int = 0
) -> str:
    """Run `code` in `manage.py shell` against this test database and bus channel."""
    from django.db import connection

    db = connection.settings_dict
    login = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": f"postgres://{login}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": redis_url,
        "TOMORI_BUS_CHANNEL": channel,
    }
    return run_python("manage.py", "shell", "-c", code, env=env, returncode=returncode)


class RedisProxy:
    """A TCP proxy to Redis whose link the test can cut and restore (an outage)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.allowed = threading.Event()
        self.allowed.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self.allowed.is_set():
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._open += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), daemon=True
                ).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        """Cut every link and refuse new ones."""
        self.allowed.clear()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def up(self) -> None:
        """Accept links again."""
        self.allowed.set()

    def close(self) -> None:
        self.down()
        self._listener.close()


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[tuple[RedisProxy, str]]:
    """Return a proxy to the test Redis and the URL that goes through it."""
    parsed = urlsplit(redis_url)
    proxy = RedisProxy(parsed.port or 6379)
    yield proxy, urlunsplit(parsed._replace(netloc=f"127.0.0.1:{proxy.port}"))
    proxy.close()
