"""Count a client's PostgreSQL round trips: a TCP proxy that reads the wire protocol.

Put it between a process and PostgreSQL (point the process's DATABASE_URL at
the proxy's port, with `sslmode=disable`: TLS would hide the messages) and it
counts, over every connection, what the client waited on: each simple query
(`Q`) is one round trip, and each extended-protocol exchange is one, ended by
its `Sync` (`S`). A round trip is classed by its statement: a read (SELECT,
SHOW, a WITH that writes nothing), a write (INSERT, UPDATE, DELETE, COPY, a
writing WITH), a transaction's control (BEGIN, COMMIT, ROLLBACK,
SAVEPOINT...) or other (SET...). A prepared statement is classed by its
Parse and counted at each use. Nothing is changed on the way: the bytes pass
as they came.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
import threading
from collections import Counter

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_WORD = re.compile(rb"\s*(?:/\*.*?\*/\s*|--[^\n]*\n\s*)*\(*\s*([A-Za-z]+)", re.S)
_WRITES = {b"INSERT", b"UPDATE", b"DELETE", b"MERGE", b"COPY", b"TRUNCATE"}
_READS = {b"SELECT", b"SHOW", b"VALUES", b"TABLE", b"FETCH"}
_CONTROL = {
    b"BEGIN",
    b"START",
    b"COMMIT",
    b"ROLLBACK",
    b"END",
    b"SAVEPOINT",
    b"RELEASE",
}
_WRITING_WITH = re.compile(rb"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.I)
KINDS = ("read", "write", "transaction", "other")


def statement_kind(sql: bytes) -> str:
    """Return read, write, transaction or other for one statement's text."""
    match = _WORD.match(sql)
    word = match.group(1).upper() if match else b""
    if word == b"WITH":
        return "write" if _WRITING_WITH.search(sql) else "read"
    if word in _READS:
        return "read"
    if word in _WRITES:
        return "write"
    if word in _CONTROL:
        return "transaction"
    return "other"


_TABLE = re.compile(
    rb'\b(?:FROM|INTO|UPDATE)\s+"?([A-Za-z_][A-Za-z0-9_]*)', re.IGNORECASE
)


def statement_label(sql: bytes) -> str:
    """Return "kind table" for one statement: its kind and the first table it names."""
    match = _TABLE.search(sql)
    table = match.group(1).decode() if match else "-"
    return f"{statement_kind(sql)} {table}"


def _cstring(payload: bytes, start: int = 0) -> tuple[bytes, int]:
    end = payload.index(b"\0", start)
    return payload[start:end], end + 1


class _Frontend:
    """One connection's client-to-server byte stream, parsed as it passes."""

    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts
        self.buffer = bytearray()
        self.started = False
        self.opaque = False  # TLS or GSS: nothing more can be read
        self.statements: dict[bytes, str] = {}
        self.current = "other"

    def feed(self, data: bytes) -> None:
        if self.opaque:
            return
        self.buffer += data
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return
                length, code = struct.unpack("!ii", self.buffer[:8])
                if len(self.buffer) < length:
                    return
                del self.buffer[:length]
                if code in (_SSL_REQUEST, _GSS_REQUEST):
                    self.counts["unreadable connections"] += 1
                    self.opaque = True
                    return
                self.started = True
                continue
            if len(self.buffer) < 5:
                return
            length = struct.unpack("!i", self.buffer[1:5])[0]
            if len(self.buffer) < length + 1:
                return
            kind = bytes(self.buffer[:1])
            payload = bytes(self.buffer[5 : length + 1])
            del self.buffer[: length + 1]
            self._message(kind, payload)

    def _message(self, kind: bytes, payload: bytes) -> None:
        if kind == b"Q":
            label = statement_label(payload)
            self.counts[label.split(" ", 1)[0]] += 1
            self.counts[label] += 1
        elif kind == b"P":
            name, at = _cstring(payload)
            sql, _ = _cstring(payload, at)
            self.current = statement_label(sql)
            if name:
                self.statements[name] = self.current
        elif kind == b"B":
            _, at = _cstring(payload)
            name, _ = _cstring(payload, at)
            if name:
                self.current = self.statements.get(name, self.current)
        elif kind == b"S":
            self.counts[self.current.split(" ", 1)[0]] += 1
            if " " in self.current:
                self.counts[self.current] += 1
            self.current = "other"


class RoundTripProxy:
    """A loopback proxy to PostgreSQL that counts the round trips passing through."""

    def __init__(self, target_host: str, target_port: int, port: int) -> None:
        self.target = (target_host, target_port)
        self.port = port
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="pg-round-trips", daemon=True
        )

    def start(self) -> RoundTripProxy:
        """Listen on the port (in a thread of its own) and return self."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._client, "127.0.0.1", self.port), self._loop
        ).result(10)
        return self

    def counts(self) -> dict[str, int]:
        """Return the round trips counted so far, by kind."""
        with self._lock:
            return {
                kind: self._counts[kind] for kind in (*KINDS, "unreadable connections")
            }

    def by_table(self) -> dict[str, int]:
        """Return the round trips counted so far by "kind table" (the first table named)."""
        with self._lock:
            return {label: n for label, n in self._counts.items() if " " in label}

    def stop(self) -> None:
        """Stop forwarding: drop every connection, then end the thread."""

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        frontend = _Frontend(Counter())
        with contextlib.suppress(asyncio.CancelledError):  # stop()
            await asyncio.gather(
                self._pipe(reader, up_writer, frontend),
                self._pipe(up_reader, writer, None),
                return_exceptions=True,
            )

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frontend: _Frontend | None,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if frontend is not None:
                    frontend.feed(data)
                    if frontend.counts:
                        with self._lock:
                            self._counts.update(frontend.counts)
                        frontend.counts.clear()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
