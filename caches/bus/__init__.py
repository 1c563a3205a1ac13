"""Cross-process delivery of invalidations and operator commands.

With `settings.REDIS_URL` set, messages go over Redis pub/sub on
`settings.TOMORI_BUS_CHANNEL`; without it the bus is in-process only. Each
message (`caches.messages`) is a versioned JSON envelope carrying its origin
and a per-origin sequence number; a subscriber that (re)connects or sees a gap clears every
invalidatable cache. Module functions act on this process's bus, built from
settings on first use (`configure()` replaces it, e.g. in tests).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from caches import process_identity
from caches.bus.commands import CommandHandler
from caches.bus.core import (
    ApplyFn,
    Bus,
    FlushFn,
    OutboxOptions,
    apply_to_registry,
    flush_registry,
)
from caches.bus.errors import BusUnavailable
from caches.messages import AnyCommand, EventTuple, WorkerReply
from tomori.domain.knobs import knobs

__all__ = [
    "Bus",
    "BusUnavailable",
    "apply_to_registry",
    "broadcast",
    "configure",
    "flush_registry",
    "get_bus",
    "outbox_options",
    "require_sendable",
    "send_command",
    "set_command_handler",
    "start_subscriber",
    "stats",
    "stop",
    "wait_for",
]

_bus: Bus | None = None
_bus_pid = 0
_lock = threading.Lock()


def get_bus() -> Bus:
    """Return this process's bus, building it from settings on first use."""
    global _bus, _bus_pid
    with _lock:
        # A forked child (Celery prefork, gunicorn) needs its own origin and
        # sequence: sharing the parent's would look like duplicates.
        if _bus is None or _bus_pid != os.getpid():
            # The process's bus speaks under the process's own origin, as its
            # outbox rows do (caches.process_identity).
            origin = process_identity.current().origin
            _bus, _bus_pid = _from_settings(origin=origin), os.getpid()
        return _bus


def _from_settings(**overrides: Any) -> Bus:
    from django.conf import settings

    options: dict[str, Any] = {
        "redis_url": getattr(settings, "REDIS_URL", "") or "",
        "channel": getattr(settings, "TOMORI_BUS_CHANNEL", "tomori:bus"),
        "worker_id": getattr(settings, "TOMORI_WORKER_ID", "") or "",
    }
    options.update({k: v for k, v in overrides.items() if v is not None})
    return Bus(**options)


def configure(
    *,
    redis_url: str | None = None,
    channel: str | None = None,
    worker_id: str | None = None,
) -> Bus:
    """Replace this process's bus (closing the old one); unset options come from settings."""
    global _bus, _bus_pid
    with _lock:
        old, _bus = (
            _bus,
            _from_settings(redis_url=redis_url, channel=channel, worker_id=worker_id),
        )
        _bus_pid = os.getpid()
    if old is not None:
        old.close()
    return _bus


def broadcast(
    events: Iterable[EventTuple],
    *,
    sent_at: float | None = None,
    outbox_ids: Iterable[int] = (),
) -> None:
    """Apply committed `events` to this process and publish them to every other."""
    get_bus().broadcast(events, sent_at=sent_at, outbox_ids=outbox_ids)


def start_subscriber(
    *,
    apply: ApplyFn | None = None,
    flush: FlushFn | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    follow_outbox: bool = False,
) -> None:
    """Start applying other processes' invalidations (on `loop`'s thread if given).

    With `follow_outbox`, also read the invalidation outbox, so that nothing
    committed is missed whatever happens to Redis or to the writer.
    """
    get_bus().start_subscriber(
        apply=apply,
        flush=flush,
        loop=loop,
        outbox=outbox_options() if follow_outbox else None,
    )


def outbox_options() -> OutboxOptions:
    """Return how workers follow the outbox, from the staleness bound and retention."""
    bound = knobs().INVALIDATION_STALENESS_BOUND_SECONDS
    # A quarter of the bound leaves room for the query and the hop to the loop.
    return OutboxOptions(
        interval=bound / 4, retention=knobs().OUTBOX_RETENTION_MINUTES * 60.0
    )


def stop(timeout: float = 5.0) -> None:
    """Stop this process's subscriber and join its thread."""
    if _bus is not None:
        _bus.stop(timeout)


def stats() -> dict[str, Any]:
    """Return the bus counters, connected flag, backlog and lag p50/p99/max (ms)."""
    return get_bus().snapshot()


def send_command(command: AnyCommand, *, timeout: float) -> list[WorkerReply]:
    """Send an operator command to every worker; return their replies within `timeout`.

    Raises BusUnavailable when Redis cannot be reached (nothing was delivered).
    """
    return get_bus().send_command(command, timeout=timeout)


def require_sendable(*, timeout: float) -> None:
    """Raise BusUnavailable (saying nothing was sent) unless a command could be sent now."""
    get_bus().require_sendable(timeout=timeout)


def set_command_handler(handler: CommandHandler | None) -> None:
    """Answer operator commands in this process with `handler(command) -> WorkerReply`."""
    get_bus().set_command_handler(handler)


def wait_for(predicate: Callable[[dict[str, Any]], bool], *, timeout: float) -> bool:
    """Block until `predicate(stats counters)` holds or `timeout` passes; return which."""
    return get_bus().stats.wait_for(predicate, timeout)
