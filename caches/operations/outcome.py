"""What came back from an operator command: each worker's reply, described for the operator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from caches.catalogs.outcomes import summarize
from caches.messages import (
    AnyCommand,
    ClearAll,
    ClearCache,
    EmergencyClear,
    FleetCommand,
    InvalidateKey,
    OnWorker,
    RefreshCatalogs,
    WorkerReply,
)

REFRESH_CATALOGS = RefreshCatalogs.OP


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
    def target(self) -> str | None:
        """Return the one worker the command was for, or None (every worker)."""
        return self.command.worker_id if isinstance(self.command, OnWorker) else None

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
            return f"{what}: {self._silence()}"
        if self.target is not None:
            return f"{what}: {self._target_answer()}"
        count = len(self.replies)
        text = f"{what}: {count} worker{'s' if count != 1 else ''} answered"
        failed = sum(not reply.ok for reply in self.replies)
        if failed:
            text += f", {failed} failed"
        if isinstance(self.command, RefreshCatalogs):
            return text
        return f"{text}, {_entries(self.total_removed)} removed in total"

    def _target_answer(self) -> str:
        if not self.ok:
            return f"worker {self.target} failed"
        if isinstance(_carried(self.command), RefreshCatalogs):
            return f"worker {self.target} answered"
        return f"worker {self.target} answered, {_entries(self.total_removed)} removed"

    def _silence(self) -> str:
        if self.target is None:
            return f"no worker answered within {self.timeout:g} s"
        return (
            f"worker {self.target} did not answer within {self.timeout:g} s "
            "(it may have stopped)"
        )

    def lines(self) -> list[str]:
        """Return one line per worker, or the no-answer line."""
        if not self.answered:
            return [self._silence()]
        return [describe_reply(reply) for reply in self.replies]

    def brief_lines(self, limit: int) -> list[str]:
        """Return `lines()`, or past `limit` replies: each failure, then the rest grouped.

        Workers that answered alike share a line ("12 workers (a, b, ...):
        removed 0 entries"); when they all differ, one line lists each
        worker's removed entries.
        """
        if len(self.replies) <= limit:
            return self.lines()
        failed = [describe_reply(reply) for reply in self.replies if not reply.ok]
        groups: dict[str, list[str]] = {}
        for reply in self.replies:
            if reply.ok:
                groups.setdefault(_describe_details(reply), []).append(reply.worker_id)
        if len(failed) + len(groups) <= limit:
            return failed + [_group_line(ids, text) for text, ids in groups.items()]
        removed = ", ".join(
            f"{r.worker_id} {r.removed:,}" for r in self.replies if r.ok
        )
        return [*failed, f"entries removed per worker: {removed}"]

    def as_dict(self) -> dict[str, Any]:
        """Return the command and replies as JSON-ready data."""
        return {
            "command": self.command.to_json(),
            "answered": self.answered,
            "ok": self.ok,
            "total_removed": self.total_removed,
            "replies": [reply.to_json() for reply in self.replies],
        }


def _group_line(worker_ids: list[str], text: str) -> str:
    if len(worker_ids) == 1:
        return f"worker {worker_ids[0]}: {text}"
    return f"{len(worker_ids)} workers ({', '.join(worker_ids)}): {text}"


def _carried(command: AnyCommand) -> FleetCommand:
    return command.command if isinstance(command, OnWorker) else command


def describe_command(command: AnyCommand) -> str:
    """Return a short human description: "clear cache user", "emergency clear on worker w3"."""
    if isinstance(command, OnWorker):
        return f"{describe_command(command.command)} on worker {command.worker_id}"
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
