"""Operator commands: build and validate them, send them over the bus, read the replies."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from caches.layers import load_all
from caches.live import LiveDataUnavailable, live_snapshots
from caches.registry import RegisteredCache, registry

logger = logging.getLogger(__name__)

CLEAR_CACHE = "clear_cache"
INVALIDATE_KEY = "invalidate_key"
CLEAR_ALL = "clear_all"
EMERGENCY_CLEAR = "emergency_clear"
REFRESH_CATALOGS = "refresh_catalogs"
OPS = (CLEAR_CACHE, INVALIDATE_KEY, CLEAR_ALL, EMERGENCY_CLEAR, REFRESH_CATALOGS)
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


def _command(op: str, *, issued_by: str, **params: Any) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex,
        "op": op,
        **params,
        "issued_by": issued_by,
        "issued_at": time.time(),
    }


def _live_cache_names() -> set[str]:
    try:
        snapshots = live_snapshots()
    except LiveDataUnavailable:
        return set()  # this process's registry decides; sending reports the fault
    return {name for snap in snapshots for name in (snap.get("caches") or {})}


def clear_cache_command(name: str, *, issued_by: str) -> dict[str, Any]:
    """Return the command clearing cache `name` on every worker."""
    if name not in _live_cache_names():
        registered_entry(name)
    return _command(CLEAR_CACHE, cache=name, issued_by=issued_by)


def invalidate_key_command(name: str, key: str, *, issued_by: str) -> dict[str, Any]:
    """Return the command dropping one key of cache `name`, after checking its shape."""
    registered_entry(name)
    try:
        registry.parse_key(name, key)
    except ValueError as exc:
        raise BadKeyError(str(exc)) from exc
    return _command(INVALIDATE_KEY, cache=name, key=key, issued_by=issued_by)


def clear_all_command(*, issued_by: str) -> dict[str, Any]:
    """Return the command clearing every clearable cache (policy `clear`) on every worker."""
    return _command(CLEAR_ALL, issued_by=issued_by)


def emergency_clear_command(
    *, include_short_term_memory: bool | None = None, issued_by: str
) -> dict[str, Any]:
    """Return the command running the emergency clear on every worker.

    include_short_term_memory=None leaves it to each worker's
    EMERGENCY_CACHE_CLEAR_INCLUDE_STM.
    """
    return _command(
        EMERGENCY_CLEAR,
        include_short_term_memory=include_short_term_memory,
        issued_by=issued_by,
    )


def refresh_catalogs_command(*, fresh: bool = False, issued_by: str) -> dict[str, Any]:
    """Return the command refreshing the OpenRouter catalogs (`fresh`: ignore the rate limit)."""
    return _command(REFRESH_CATALOGS, fresh=bool(fresh), issued_by=issued_by)


@dataclass(frozen=True, slots=True)
class WorkerReply:
    """One worker's answer to a command."""

    worker_id: str
    ok: bool
    removed: int
    error: str | None = None
    shard_ids: list[int] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    duration_ms: float | None = None

    @classmethod
    def from_dict(cls, reply: Mapping[str, Any]) -> WorkerReply:
        """Build a reply from the dict a worker sent (see `execute_command`)."""
        return cls(
            worker_id=str(reply.get("worker_id") or "?"),
            ok=bool(reply.get("ok")),
            removed=int(reply.get("removed") or 0),
            error=reply.get("error"),
            shard_ids=reply.get("shard_ids"),
            details=dict(reply.get("details") or {}),
            duration_ms=reply.get("duration_ms"),
        )

    def describe(self) -> str:
        """Return one line: "worker w1 (shards 0, 1): removed 12 entries"."""
        shards = ""
        if self.shard_ids:
            shards = " (shards " + ", ".join(str(s) for s in self.shard_ids) + ")"
        head = f"worker {self.worker_id}{shards}"
        if not self.ok:
            return f"{head}: FAILED: {self.error or 'unknown error'}"
        return f"{head}: {_describe_details(self)}"


def _describe_details(reply: WorkerReply) -> str:
    details = reply.details
    entries = f"removed {_entries(reply.removed)}"
    if "results" in details:  # catalogs
        parts = [
            f"{k} {'ok' if ok else 'not refreshed'}"
            for k, ok in details["results"].items()
        ]
        return "catalogs: " + (", ".join(parts) or "none")
    itemised = _itemise(details.get("cleared"))
    discord = _itemise(details.get("discord_cleared"), strip="discord_")
    if discord:  # the emergency clear: discord.py's caches are part of the total
        itemised += ("; " if itemised else "") + "discord.py " + discord
    return f"{entries}" + (f" ({itemised})" if itemised else "")


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

    command: dict[str, Any]
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
        if self.command.get("op") == REFRESH_CATALOGS:
            return text
        return f"{text}, {_entries(self.total_removed)} removed in total"

    def lines(self) -> list[str]:
        """Return one line per worker, or the no-answer line."""
        if not self.answered:
            return [f"no worker answered within {self.timeout:g} s"]
        return [reply.describe() for reply in self.replies]

    def as_dict(self) -> dict[str, Any]:
        """Return the command and replies as JSON-ready data."""
        return {
            "command": self.command,
            "answered": self.answered,
            "ok": self.ok,
            "total_removed": self.total_removed,
            "replies": [
                {name: getattr(r, name) for name in r.__dataclass_fields__}
                for r in self.replies
            ],
        }


def send_command(
    command: dict[str, Any], *, timeout: float = DEFAULT_TIMEOUT
) -> OperationOutcome:
    """Publish `command` to every worker and collect their replies until `timeout`.

    Raises caches.bus.BusUnavailable when Redis cannot be reached.
    """
    from caches import bus

    raw = bus.send_command(command, timeout=timeout)
    replies = [
        WorkerReply.from_dict(reply)
        for reply in raw
        if reply.get("command_id") in (None, command["id"])
    ]
    replies.sort(key=lambda reply: reply.worker_id)
    logger.info(
        "operator command %s %s by %s: %d worker(s) answered",
        command["op"],
        command.get("cache", ""),
        command.get("issued_by"),
        len(replies),
    )
    return OperationOutcome(command=command, replies=replies, timeout=timeout)


def describe_command(command: Mapping[str, Any]) -> str:
    """Return a short human description: "clear cache user", "emergency clear"."""
    op = command.get("op")
    if op == CLEAR_CACHE:
        return f"clear cache {command.get('cache')}"
    if op == INVALIDATE_KEY:
        return f"invalidate key {command.get('key')!r} of cache {command.get('cache')}"
    if op == CLEAR_ALL:
        return "clear every clearable cache"
    if op == EMERGENCY_CLEAR:
        stm = (
            " including short-term memory"
            if command.get("include_short_term_memory")
            else ""
        )
        return f"emergency clear{stm}"
    if op == REFRESH_CATALOGS:
        return "refresh catalogs" + (" (fresh)" if command.get("fresh") else "")
    return str(op)
