"""Which process this is: its kind (admin, manage.py <command>, celery, worker) and host:pid.

Each entry point names its kind once, at start (`set_kind`): `manage.py`,
the WSGI/ASGI modules, the Celery app and the bot worker. Invalidations carry
it as their origin, in outbox rows and bus messages alike, so a log line says
which kind of process wrote (``invalidated from admin-web:host:812:3fa2c1``).
A forked child (gunicorn, Celery prefork) is a process of its own: its pid
and token are its own, its kind its parent's.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from dataclasses import dataclass, replace

#: Kinds whose processes hold no cache layers of their own: an invalidation
#: they commit is published for the workers, not applied to an empty registry.
WITHOUT_CACHES = ("admin-web", "celery-worker", "celery-beat", "manage.py")
#: A process no entry point named (tests, scripts, benchmarks): it may hold caches.
UNNAMED = "process"


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """One process: what started it, where, and a token that tells pid reuse apart."""

    kind: str
    host: str
    pid: int
    token: str
    #: Overrides host:pid in the origin (a worker's id: host:pid[:shards]).
    name: str = ""

    @property
    def origin(self) -> str:
        """Return the origin stamped on what this process sends (kind:host:pid:token)."""
        return f"{self.label}:{self.token}"

    @property
    def label(self) -> str:
        """Return kind:host:pid (or kind:name), without the token."""
        return f"{self.kind}:{self.name or f'{self.host}:{self.pid}'}"

    @property
    def holds_caches(self) -> bool:
        """Return whether this process holds cache layers that invalidations must reach."""
        return not self.kind.startswith(WITHOUT_CACHES)


_lock = threading.Lock()
_current: ProcessIdentity | None = None


def _new(kind: str, name: str = "") -> ProcessIdentity:
    return ProcessIdentity(
        kind=_clean(kind) or UNNAMED,
        host=socket.gethostname(),
        pid=os.getpid(),
        token=secrets.token_hex(3),
        name=_clean(name),
    )


def _clean(text: str) -> str:
    # Origins travel in bounded fields: short, one line, no separators inside kinds.
    return "".join(c if c.isprintable() and not c.isspace() else "-" for c in text)[:80]


def current() -> ProcessIdentity:
    """Return this process's identity (a fresh one after a fork: its own pid and token)."""
    global _current
    with _lock:
        if _current is None:
            _current = _new(UNNAMED)
        elif _current.pid != os.getpid():
            _current = replace(
                _current, pid=os.getpid(), token=secrets.token_hex(3), name=""
            )
        return _current


def set_kind(kind: str, *, name: str = "") -> ProcessIdentity:
    """Name this process's kind ("admin-web", "manage.py-shell", "worker" ...) at start."""
    global _current
    with _lock:
        _current = _new(kind, name)
        return _current


def kind_of_command(argv: list[str]) -> str:
    """Return the kind `manage.py` is started as: `manage.py-<command>`, the admin, a worker."""
    command = argv[1] if len(argv) > 1 else "help"
    if command == "runserver":
        return "admin-web"
    if command == "runbot":
        return "worker"
    return f"manage.py-{command}"
