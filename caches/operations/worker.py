"""The worker side: run an operator command against this process, build the snapshot."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from caches.catalogs.outcomes import RefreshOutcome
from caches.core.loop import run_on_loop
from caches.messages import (
    AnyCommand,
    ClearAll,
    ClearCache,
    Command,
    EmergencyClear,
    FleetCommand,
    InvalidateKey,
    OnWorker,
    RefreshCatalogs,
    WorkerReply,
)
from caches.registry import CacheRegistry, EmergencyPolicy, registry

logger = logging.getLogger(__name__)

DEFAULT_CATALOG_TIMEOUT = 30.0


@dataclass
class WorkerContext:
    """What a worker's commands act on: its registry, discord.py client, catalogs, loop.

    `loop` is the event loop the caches and the client live on; a command
    arriving on another thread (a bus listener) is run there. A client that
    logs in after the context is built is reached through `client_getter`.
    """

    worker_id: str
    shard_ids: list[int] | None = None
    client: Any = None
    client_getter: Callable[[], Any] | None = None
    catalogs: Any = None
    loop: asyncio.AbstractEventLoop | None = None
    registry: CacheRegistry = field(default_factory=lambda: registry)
    catalog_timeout: float = DEFAULT_CATALOG_TIMEOUT
    #: Operator commands this worker ran, however they arrived (Redis or in-process).
    commands_run: int = 0

    def current_client(self) -> Any:
        """Return the discord.py client now, or None before it exists."""
        if self.client is not None:
            return self.client
        return self.client_getter() if self.client_getter is not None else None


class CommandFailed(Exception):
    """A command that this worker cannot carry out; the message goes in the reply."""


Outcome = tuple[int, dict[str, Any]]


def is_clearable(policy: EmergencyPolicy | str) -> bool:
    """Return whether an operator may clear a cache of this emergency policy.

    One set for every button: a cache's clear button, "Clear every clearable
    cache" and the emergency clear all empty exactly the `clear` caches.
    """
    return str(policy) == EmergencyPolicy.CLEAR.value


def _clear_cache(command: ClearCache, ctx: WorkerContext) -> Outcome:
    name = _cache_name(command.cache, ctx)
    policy = ctx.registry.entry(name).policy
    if not is_clearable(policy):
        # Short-term memory is conversation state and catalogs are provider
        # metadata: neither is a cache an operator should wipe with one click.
        raise CommandFailed(
            f"{name} has policy {policy}: it is not cleared by hand "
            "(use the emergency clear with short-term memory, or reload catalogs)"
        )
    removed = ctx.registry.clear(name)
    return removed, {"cache": name, "removed": removed}


def _invalidate_key(command: InvalidateKey, ctx: WorkerContext) -> Outcome:
    name = _cache_name(command.cache, ctx)
    text = command.key
    try:
        key = ctx.registry.parse_key(name, text)
    except ValueError as exc:
        raise CommandFailed(str(exc)) from exc
    removed = ctx.registry.invalidate(name, key)
    return removed, {"cache": name, "key": text, "removed": removed}


def _clear_all(command: ClearAll, ctx: WorkerContext) -> Outcome:
    # Not registry.clear_invalidatable(): that is the bus's flush after a gap,
    # which also empties preserved caches such as llm.
    cleared = {
        entry.name: entry.cache.clear()
        for entry in ctx.registry.entries()
        if is_clearable(entry.policy)
    }
    return sum(cleared.values()), {"cleared": cleared}


def _emergency_clear(command: EmergencyClear, ctx: WorkerContext) -> Outcome:
    from caches.memory.emergency import clear_emergency_caches

    result = clear_emergency_caches(
        client=ctx.current_client(),
        include_short_term_memory=command.include_short_term_memory,
        source="operator",
    )
    if result.skipped:
        raise CommandFailed("EMERGENCY_CACHE_CLEAR_ENABLED is false on this worker")
    return result.total_cleared, result.as_dict()


async def _refresh_catalogs(command: RefreshCatalogs, ctx: WorkerContext) -> Outcome:
    if ctx.catalogs is None:
        raise CommandFailed("this worker holds no catalogs")
    fresh = command.fresh
    results: dict[str, bool] = {}
    reasons: dict[str, str] = {}
    for catalog in ctx.catalogs:
        try:
            outcome = await catalog.refresh_with_reason(force=fresh)
        except Exception as exc:  # one catalog's failure must not hide the others
            logger.warning("catalog %s refresh raised: %s", catalog.name, exc)
            outcome = RefreshOutcome(False, f"refresh raised {type(exc).__name__}")
        results[catalog.name] = outcome.refreshed
        if outcome.reason is not None:
            reasons[catalog.name] = outcome.reason
    sizes = {catalog.name: len(catalog) for catalog in ctx.catalogs}
    details = {"results": results, "reasons": reasons, "sizes": sizes, "fresh": fresh}
    return 0, details


def _cache_name(name: str, ctx: WorkerContext) -> str:
    if name not in ctx.registry:
        raise CommandFailed(f"unknown cache {name!r} on this worker")
    return name


def is_addressed_to(command: AnyCommand, worker_id: str) -> bool:
    """Return whether a worker with this id runs `command` (every one, unless it names one)."""
    return not isinstance(command, OnWorker) or command.worker_id == worker_id


async def _run(command: FleetCommand, ctx: WorkerContext) -> Outcome:
    # One branch per command type: mypy checks that every one is handled.
    if isinstance(command, ClearCache):
        return _clear_cache(command, ctx)
    if isinstance(command, InvalidateKey):
        return _invalidate_key(command, ctx)
    if isinstance(command, ClearAll):
        return _clear_all(command, ctx)
    if isinstance(command, EmergencyClear):
        return _emergency_clear(command, ctx)
    if isinstance(command, RefreshCatalogs):
        return await _refresh_catalogs(command, ctx)
    raise CommandFailed(f"unknown command {command.op!r}")


def _reply(
    command: Command,
    ctx: WorkerContext,
    started: float,
    outcome: Outcome | None,
    error: str | None,
) -> WorkerReply:
    removed, details = outcome if outcome is not None else (0, {})
    # The id of the command as sent; the op of the one run (an OnWorker's).
    carried = command.command if isinstance(command, OnWorker) else command
    return WorkerReply(
        command_id=command.id,
        op=carried.op,
        worker_id=ctx.worker_id,
        shard_ids=None if ctx.shard_ids is None else tuple(ctx.shard_ids),
        ok=error is None,
        error=error,
        removed=removed,
        details=details,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )


async def execute_command_async(
    command: AnyCommand, *, context: WorkerContext
) -> WorkerReply:
    """Run one operator command on the event loop; return this worker's reply.

    A command for another worker (`OnWorker`) fails here: `make_command_handler`
    declines it before it comes this far.
    """
    started = time.perf_counter()
    carried = command.command if isinstance(command, OnWorker) else command
    op = carried.op
    try:
        if isinstance(command, OnWorker) and command.worker_id != context.worker_id:
            raise CommandFailed(
                f"the command is for worker {command.worker_id}, "
                f"not {context.worker_id}"
            )
        outcome = await _run(carried, context)
    except CommandFailed as exc:
        return _reply(command, context, started, None, str(exc))
    except Exception as exc:  # the operator sees it; the worker carries on
        logger.exception("operator command %s failed", op)
        return _reply(command, context, started, None, f"{type(exc).__name__}: {exc}")
    logger.info("operator command %s by %s done", op, command.issued_by)
    return _reply(command, context, started, outcome, None)


def execute_command(command: AnyCommand, *, context: WorkerContext) -> WorkerReply:
    """Run one operator command against this process; return the reply.

    Called from a thread other than `context.loop`'s (a bus listener), the
    command runs on that loop, where the caches and the client live, and this
    waits for it. Without a running loop it runs here; on the loop thread
    itself use `execute_command_async`.
    """
    return run_on_loop(
        context.loop,
        lambda: execute_command_async(command, context=context),
        timeout=context.catalog_timeout + 5,
    )


def make_command_handler(
    context: WorkerContext, *, after: Callable[[], object] | None = None
) -> Callable[[AnyCommand], WorkerReply | None]:
    """Return a bus command handler running `execute_command`, then `after()`.

    `after` is where a worker republishes its live snapshot, so the dashboard
    shows a command's effect at once instead of at the next interval. Each
    command counts in `context.commands_run` before `after` runs. A command
    for another worker is declined (None: the bus says it was not handled).
    """
    counter = itertools.count(context.commands_run + 1)  # next() is atomic

    def handle(command: AnyCommand) -> WorkerReply | None:
        if not is_addressed_to(command, context.worker_id):
            return None
        reply = execute_command(command, context=context)
        context.commands_run = next(counter)
        if after is not None:
            try:
                after()
            except Exception:  # the reply matters more than the refresh
                logger.exception("after-command hook failed")
        return reply

    return handle
