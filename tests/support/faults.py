"""Services a fault test owns and breaks: its own redis-server, a TCP proxy to PostgreSQL.

The machine's PostgreSQL (5432) and Redis (6379) are shared with CI and other
runs: never stop them. A test starts an `OwnRedis` on a free port and kills,
restarts or pauses (SIGSTOP) that one, and reaches PostgreSQL through a
`TcpProxy` it can make refuse (close every connection at once) or freeze
(accept and hold connections, forwarding nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from urllib.parse import urlsplit, urlunsplit


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate, *, timeout: float, interval: float = 0.02) -> bool:  # type: ignore[no-untyped-def]
    """Poll `predicate()` until it is true or `timeout` passes; return which."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        threading.Event().wait(interval)
    return bool(predicate())


class OwnRedis:
    """A redis-server of the test's own, on its own port, that it may break."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="tomori-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        """Start (or restart) the server and wait until it answers PING."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not wait_until(self.answers, timeout=10):
            raise RuntimeError(f"redis-server on {self.port} did not start")
        return self

    def answers(self) -> bool:
        """Return whether the server answers PING right now."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server (every key and connection is gone)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        """Kill the server and start a new, empty one on the same port."""
        self.kill()
        self.start()

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open and nothing answers."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop for good and remove its directory."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class TcpProxy:
    """A TCP proxy on loopback in front of `target`: forward, refuse or freeze.

    - `forward()`: pass bytes both ways (the default);
    - `refuse()`: close every open connection and every new one at once;
    - `freeze()`: keep connections open and accept new ones, forwarding
      nothing (a paused or partitioned server: the client's writes are
      acknowledged by the kernel, and no answer ever comes).
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.mode = "forward"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._resumed: asyncio.Event | None = None

    def start(self) -> TcpProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    def _call(self, fn) -> None:  # type: ignore[no-untyped-def]
        async def run() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def forward(self) -> None:
        """Pass bytes again (held bytes flow on)."""

        def go() -> None:
            self.mode = "forward"
            assert self._resumed is not None
            self._resumed.set()

        self._call(go)

    def freeze(self) -> None:
        """Hold every connection open and forward nothing."""

        def go() -> None:
            self.mode = "freeze"
            assert self._resumed is not None
            self._resumed.clear()

        self._call(go)

    def refuse(self) -> None:
        """Close every connection now and each new one at once."""

        def go() -> None:
            self.mode = "refuse"
            assert self._resumed is not None
            self._resumed.set()
            for writer in list(self._writers):
                writer.transport.abort()

        self._call(go)

    def stop(self) -> None:
        async def go() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            # Let them end (no "Task was destroyed but it is pending" at exit).
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(go(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self.mode == "refuse":
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer), self._pipe(up_reader, writer)
            )
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        assert self._resumed is not None
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                await self._resumed.wait()
                if self.mode == "refuse":
                    break
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


def proxied_url(database_url: str, proxy: TcpProxy) -> str:
    """Return `database_url` pointed at `proxy` instead of its own host and port."""
    parts = urlsplit(database_url)
    netloc = parts.netloc.rsplit("@", 1)
    auth = netloc[0] + "@" if len(netloc) == 2 else ""
    return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{proxy.port}"))


async def until(predicate, *, timeout: float = 10.0, interval: float = 0.005) -> None:  # type: ignore[no-untyped-def]
    """Wait on the running loop until `predicate()` holds; fail after `timeout` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(interval)
