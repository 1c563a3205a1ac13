"""Collect the invalidation events of each write and dispatch them when it commits.

Each write operation (a save, an update, a bulk write, a delete with all its
cascades) registers one `on_commit` callback carrying its events: one bus
message. A savepoint rollback makes Django discard the callbacks registered
inside it, and with them exactly the events recorded there; a rollback
discards everything; in autocommit mode the callback runs at once, after the
write. Batches are per operation, not per transaction, so that a test's
`captureOnCommitCallbacks` block runs exactly the callbacks of its own writes.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from caches import process_identity
from caches.invalidation.lookup import DbLookup
from caches.rules import Event, unique

logger = logging.getLogger(__name__)

_PENDING_ATTR = "_tomori_invalidation_pending"


@dataclass
class Captured:
    """The events seen while a `capture()` block was active."""

    recorded: list[Event] = field(default_factory=list)
    dispatched: list[Event] = field(default_factory=list)


_captures: contextvars.ContextVar[tuple[Captured, ...]] = contextvars.ContextVar(
    "tomori_invalidation_captures", default=()
)


class _Pending:
    """Events waiting for one commit: the `on_commit` callback itself."""

    __slots__ = (
        "alias",
        "scope",
        "events",
        "outbox_ids",
        "lookup",
        "registered",
        "done",
    )

    def __init__(self, alias: str, scope: object | None) -> None:
        self.alias = alias
        self.scope = scope
        self.events: list[Event] = []
        self.outbox_ids: list[int] = []
        self.lookup = DbLookup(alias)
        self.registered = False
        self.done = False

    def add(self, events: list[Event]) -> None:
        # In the write's own transaction: committed with it, or not at all.
        # The row takes over what the database's triggers recorded for the
        # transaction's statements so far; those events go out with ours.
        row_id, claimed = _store_in_outbox(events, self.alias)
        self.outbox_ids.append(row_id)
        self.events.extend(events)
        self.events.extend(Event(*e) for e in claimed)
        for captured in _captures.get():
            captured.recorded.extend(events)
        if not self.registered:
            self.registered = True
            # In autocommit mode this runs the callback at once.
            transaction.on_commit(self, using=self.alias, robust=True)

    def __call__(self) -> None:
        self.done = True
        dispatch(self.events, outbox_ids=self.outbox_ids)


def _store_in_outbox(events: list[Event], using: str) -> tuple[int, Any]:
    from caches import outbox

    return outbox.append(events, origin=process_identity.current().origin, using=using)


def pending_for(
    using: str = DEFAULT_DB_ALIAS, *, scope: object | None = None
) -> _Pending:
    """Return the batch for events recorded now on `using`.

    Events of one `scope` (the object a cascading delete started from) share
    a batch; without a scope every call starts a new one.
    """
    conn = connections[using]
    pending = getattr(conn, _PENDING_ATTR, None)
    if scope is not None and pending is not None and _joinable(conn, pending, scope):
        return pending
    pending = _Pending(using, scope)
    setattr(conn, _PENDING_ATTR, pending)
    return pending


def _joinable(conn: Any, pending: _Pending, scope: object) -> bool:
    # Merge only into the newest callback registered under the very same
    # savepoints: it then shares the new events' fate on rollback.
    if pending.scope is not scope or pending.done:
        return False
    if not pending.registered or not conn.in_atomic_block:
        return False
    hooks = conn.run_on_commit
    return (
        bool(hooks)
        and hooks[-1][1] is pending
        and hooks[-1][0] == set(conn.savepoint_ids)
    )


def record(events: Iterable[Event], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Queue `events` to be applied and published when the current transaction commits."""
    events = [Event(*e) for e in events]
    if events:
        pending = pending_for(using)
        # A write a repository declares may have moved any looked-up id.
        pending.lookup.clear()
        pending.add(unique(events))


class Touched:
    """The events a raw-SQL write declares it touched (see `raw_write`)."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.events = [Event(*e) for e in events]

    def add(self, cache: str, op: str = "key", *args: Any) -> None:
        """Declare that the write touched `op(*args)` of `cache`."""
        self.events.append(Event(cache, op, tuple(args)))


@contextmanager
def raw_write(*events: Event, using: str = DEFAULT_DB_ALIAS) -> Iterator[Touched]:
    """Run a raw-SQL write in a transaction that invalidates what it declares.

    `with raw_write(Event("tomori_state", "key", (sdid,))) as touched:` then
    `touched.add(...)` for keys known only after the SQL ran. Nothing is
    recorded if the block raises.
    """
    touched = Touched(events)
    with transaction.atomic(using=using):
        yield touched
        record(touched.events, using=using)


@contextmanager
def capture() -> Iterator[Captured]:
    """Record the events recorded and dispatched in this context while active."""
    captured = Captured()
    token = _captures.set((*_captures.get(), captured))
    try:
        yield captured
    finally:
        _captures.reset(token)


def dispatch(events: Iterable[Event], *, outbox_ids: Iterable[int] = ()) -> None:
    """Apply committed `events` to this process and publish them to the others.

    `outbox_ids` name the outbox rows the events were stored in, so that no
    process applies them a second time when it reads the outbox.
    """
    events = unique(events)
    if not events:
        return
    for captured in _captures.get():
        captured.dispatched.extend(events)
    from caches import bus

    try:
        bus.broadcast(events, sent_at=time.time(), outbox_ids=list(outbox_ids))
    except Exception:
        # The write has committed; its caller must not see a bus failure.
        logger.exception("could not dispatch %d invalidation event(s)", len(events))
