"""Operator commands: build and validate them, send them over the bus, read the replies."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from caches.catalogs.outcomes import summarize
from caches.layers import load_all
from caches.live import LiveDataUnavailable, live_snapshots
from caches.messages import (
    COMMANDS,
    AnyCommand,
    ClearAll,
    ClearCache,
    EmergencyClear,
    InvalidateKey,
    RefreshCatalogs,
    WorkerReply,
)
from caches.registry import RegisteredCache, registry

logger = logging.getLogger(__name__)

CLEAR_CACHE = ClearCache.OP
INVALIDATE_KEY = InvalidateKey.OP
CLEAR_ALL = ClearAll.OP
EMERGENCY_CLEAR = EmergencyClear.OP
REFRESH_CATALOGS = RefreshCatalogs.OP
OPS = tuple(COMMANDS)
DEFAULT_TIMEOUT = 3.0


class OperationError(Exception):
    """An operator command that cannot be sent; the message is for the operator."""


class UnknownCacheError(OperationError):
    """The cache name is not a registered layer."""


class BadKeyError(OperationError):
    """The typed key does not have the layer's key shape."""


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


def describe_reply(reply: WorkerReply) -> str:
    """Return one line: "worker w1 (shards 0, 1): removed 12 entries"."""
    shards = ""
    if reply.shard_ids:
        shards = " (shards " + ", ".join(str(s) for s in reply.shard_ids) + ")"
    head = f"worker {reply.worker_id}{shards}"
    if not reply.ok:
        return f"{head}: FAILED: {reply.error or 'unknown error'}"
    return f"{head}: {_describe_details(reply)}"


def _describe_details(reply: WorkerReply) -> str:
    details = reply.details
    entries = f"removed {_entries(reply.removed)}"
    if reply.op == REFRESH_CATALOGS:
        return "catalogs: " + _describe_refreshes(details)
    itemised = _itemise(details.get("cleared"))
    discord = _itemise(details.get("discord_cleared"), strip="discord_")
    if discord:  # the emergency clear: discord.py's caches are part of the total
        itemised += ("; " if itemised else "") + "discord.py " + discord
    return f"{entries}" + (f" ({itemised})" if itemised else "")


def _describe_refreshes(details: Mapping[str, Any]) -> str:
    """Return "text ok; embedding not refreshed: rate-limited, ... (use --fresh)"."""
    results = details.get("results")
    reasons = details.get("reasons")
    reasons = reasons if isinstance(reasons, Mapping) else {}
    why = {
        str(name): None if ok else str(reasons.get(name) or "unknown reason")
        for name, ok in (results.items() if isinstance(results, Mapping) else ())
    }
    return summarize(why, force_hint=" (use --fresh)")


def _entries(count: int) -> str:
    return f"{count:,} entr{'y' if count == 1 else 'ies'}"


def _itemise(counts: Any, *, strip: str = "") -> str:
    """Return "user 12, llm 3" for every non-zero count (they sum to the total)."""
    if not isinstance(counts, Mapping):
        return ""
    return ", ".join(
        f"{name.removeprefix(strip)} {count:,}"
        for name, count in counts.items()
        if count
    )


@dataclass(frozen=True, slots=True)
class OperationOutcome:
    """A sent command and every worker reply that came back before the timeout."""

    command: AnyCommand
    replies: list[WorkerReply]
    timeout: float

    @property
    def answered(self) -> bool:
        """Return whether any worker answered."""
        return bool(self.replies)

    @property
    def ok(self) -> bool:
        """Return whether some worker answered and none failed."""
        return self.answered and all(reply.ok for reply in self.replies)

    @property
    def total_removed(self) -> int:
        """Return entries removed across every worker that answered."""
        return sum(reply.removed for reply in self.replies)

    def summary(self) -> str:
        """Return one line: "clear cache user: 2 workers answered, 7 entries removed"."""
        what = describe_command(self.command)
        if not self.answered:
            return f"{what}: no worker answered within {self.timeout:g} s"
        count = len(self.replies)
        text = f"{what}: {count} worker{'s' if count != 1 else ''} answered"
        failed = sum(not reply.ok for reply in self.replies)
        if failed:
            text += f", {failed} failed"
        if isinstance(self.command, RefreshCatalogs):
            return text
        return f"{text}, {_entries(self.total_removed)} removed in total"

    def lines(self) -> list[str]:
        """Return one line per worker, or the no-answer line."""
        if not self.answered:
            return [f"no worker answered within {self.timeout:g} s"]
        return [describe_reply(reply) for reply in self.replies]

    def as_dict(self) -> dict[str, Any]:
        """Return the command and replies as JSON-ready data."""
        return {
            "command": self.command.to_json(),
            "answered": self.answered,
            "ok": self.ok,
            "total_removed": self.total_removed,
            "replies": [reply.to_json() for reply in self.replies],
        }


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


def describe_command(command: AnyCommand) -> str:
    """Return a short human description: "clear cache user", "emergency clear"."""
    if isinstance(command, ClearCache):
        return f"clear cache {command.cache}"
    if isinstance(command, InvalidateKey):
        return f"invalidate key {command.key!r} of cache {command.cache}"
    if isinstance(command, ClearAll):
        return "clear every clearable cache"
    if isinstance(command, EmergencyClear):
        stm = (
            " including short-term memory" if command.include_short_term_memory else ""
        )
        return f"emergency clear{stm}"
    return "refresh catalogs" + (" (fresh)" if command.fresh else "")
