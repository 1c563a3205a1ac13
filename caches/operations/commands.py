"""Operator commands: build and validate them, send them over the bus, collect the replies."""

from __future__ import annotations

import logging
from functools import cache

from caches.layers import load_all
from caches.live import LiveDataUnavailable, live_snapshots, snapshot_ttl_seconds
from caches.messages import (
    COMMANDS,
    AnyCommand,
    ClearAll,
    ClearCache,
    EmergencyClear,
    FleetCommand,
    InvalidateKey,
    OnWorker,
    RefreshCatalogs,
)
from caches.operations.outcome import OperationOutcome, describe_command
from caches.registry import RegisteredCache, registry

logger = logging.getLogger(__name__)

CLEAR_CACHE = ClearCache.OP
INVALIDATE_KEY = InvalidateKey.OP
CLEAR_ALL = ClearAll.OP
EMERGENCY_CLEAR = EmergencyClear.OP
REFRESH_CATALOGS = RefreshCatalogs.OP
ON_WORKER = OnWorker.OP
OPS = tuple(COMMANDS)
DEFAULT_TIMEOUT = 3.0
#: Live worker ids named in an "is not live" error, at most.
NAMED_WORKERS = 5


class OperationError(Exception):
    """An operator command that cannot be sent; the message is for the operator."""


class UnknownCacheError(OperationError):
    """The cache name is not a registered layer."""


class BadKeyError(OperationError):
    """The typed key does not have the layer's key shape."""


class UnknownWorkerError(OperationError):
    """The named worker has published no live snapshot: it stopped, or never ran."""


@cache
def ensure_layers_loaded() -> list[str]:
    """Import every cache layer once, so this process knows each one's key shape.

    The admin process holds no cache entries, but it validates keys with the
    layers' `parse_key` and reads their emergency policies; one broken layer
    must not take the dashboard down.
    """
    return load_all(strict=False)


def registered_entry(name: str) -> RegisteredCache:
    """Return this process's registry entry for `name`, or raise UnknownCacheError."""
    ensure_layers_loaded()
    if name in registry:
        return registry.entry(name)
    known = ", ".join(registry.names()) or "(none registered)"
    raise UnknownCacheError(f"unknown cache {name!r}; known caches: {known}")


def _live_cache_names() -> set[str]:
    try:
        snapshots = live_snapshots()
    except LiveDataUnavailable:
        return set()  # this process's registry decides; sending reports the fault
    return {name for snap in snapshots for name in snap.caches}


def clear_cache_command(name: str, *, issued_by: str) -> ClearCache:
    """Return the command clearing cache `name` on every worker."""
    if name not in _live_cache_names():
        registered_entry(name)
    return ClearCache.issue(cache=name, issued_by=issued_by)


def invalidate_key_command(name: str, key: str, *, issued_by: str) -> InvalidateKey:
    """Return the command dropping one key of cache `name`, after checking its shape."""
    registered_entry(name)
    try:
        registry.parse_key(name, key)
    except ValueError as exc:
        raise BadKeyError(str(exc)) from exc
    return InvalidateKey.issue(cache=name, key=key, issued_by=issued_by)


def clear_all_command(*, issued_by: str) -> ClearAll:
    """Return the command clearing every clearable cache (policy `clear`) on every worker."""
    return ClearAll.issue(issued_by=issued_by)


def emergency_clear_command(
    *, include_short_term_memory: bool | None = None, issued_by: str
) -> EmergencyClear:
    """Return the command running the emergency clear on every worker.

    include_short_term_memory=None leaves it to each worker's
    EMERGENCY_CACHE_CLEAR_INCLUDE_STM.
    """
    return EmergencyClear.issue(
        include_short_term_memory=include_short_term_memory, issued_by=issued_by
    )


def refresh_catalogs_command(*, fresh: bool = False, issued_by: str) -> RefreshCatalogs:
    """Return the command refreshing the OpenRouter catalogs (`fresh`: ignore the rate limit)."""
    return RefreshCatalogs.issue(fresh=bool(fresh), issued_by=issued_by)


def on_worker_command(command: FleetCommand, worker_id: str) -> OnWorker:
    """Return `command` addressed to the live worker `worker_id` alone.

    Raises UnknownWorkerError when no live snapshot has that id. With the
    snapshots unreadable (Redis down) it is not checked: sending reports that.
    """
    try:
        live = [snapshot.worker_id for snapshot in live_snapshots()]
    except LiveDataUnavailable:
        live = None
    if live is not None and worker_id not in live:
        raise UnknownWorkerError(_not_live(worker_id, live))
    return OnWorker(
        # One id for both: the worker's reply names the command it ran.
        id=command.id,
        issued_by=command.issued_by,
        issued_at=command.issued_at,
        worker_id=worker_id,
        command=command,
    )


def _not_live(worker_id: str, live: list[str]) -> str:
    ttl = snapshot_ttl_seconds()
    named = ", ".join(live[:NAMED_WORKERS]) or "none"
    more = len(live) - NAMED_WORKERS
    named += f" (+{more} more)" if more > 0 else ""
    return (
        f"worker {worker_id!r} is not live (no snapshot in the last {ttl:g} s: "
        f"it stopped or was replaced); live workers: {named}"
    )


def send_command(
    command: AnyCommand, *, timeout: float = DEFAULT_TIMEOUT
) -> OperationOutcome:
    """Publish `command` to every worker and collect their replies until `timeout`.

    Raises caches.bus.BusUnavailable when Redis cannot be reached.
    """
    from caches import bus

    raw = bus.send_command(command, timeout=timeout)
    replies = [reply for reply in raw if reply.command_id in (None, command.id)]
    replies.sort(key=lambda reply: reply.worker_id)
    logger.info(
        "operator command %s by %s: %d worker(s) answered",
        describe_command(command),
        command.issued_by,
        len(replies),
    )
    return OperationOutcome(command=command, replies=replies, timeout=timeout)
