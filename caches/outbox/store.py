"""The outbox table's reads and writes (the only ORM code of `caches.outbox`)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from caches.messages import (
    EventTuple,
    MalformedMessage,
    events_from_json,
    events_to_json,
    iter_events_text,
)
from caches.outbox.tracker import OutboxRow
from tomori.domain.repositories.compiled import CompiledRead

logger = logging.getLogger(__name__)

#: Rows read per query; a longer backlog is read in several.
BATCH = 1000


def _model():  # type: ignore[no-untyped-def]
    from caches.models import InvalidationOutbox

    return InvalidationOutbox


def append(
    events: Iterable[EventTuple], *, origin: str, using: str = DEFAULT_DB_ALIAS
) -> tuple[int, tuple[EventTuple, ...]]:
    """Store one write's events in the current transaction; return the row id.

    The row also takes over the rows the database's triggers recorded for
    this transaction's statements so far (`caches.outbox.capture`): their
    events are returned, to be published with the write's own, so a change
    Django made is stored and delivered once, and a raw statement run in the
    same transaction is not lost.
    """
    from django.db import connections

    connection = connections[using]
    payload = events_to_json(events)
    if connection.vendor == "postgresql":
        return _append_claiming(connection, payload, origin[:200])
    claimed = _claim_sqlite(using)
    row = (
        _model()
        .objects.using(using)
        .create(
            created_at=timezone.now(),
            origin=origin[:200],
            events=payload + events_to_json(claimed),
        )
    )
    return int(row.id), claimed


# The claimed rows' events that the write's own do not hold already (a
# statement Django tracked was recorded by the triggers too): a 10,000-row
# update stores 30,000 events once, not twice, and only the extra ones (raw
# SQL run in the transaction) come back to be published.
_CLAIM = """
WITH claimed AS (
    DELETE FROM caches_invalidation_outbox WHERE tx = txid_current() RETURNING events
), mine AS (
    SELECT %s::jsonb AS events
), extra AS (
    SELECT coalesce(jsonb_agg(e), '[]'::jsonb) AS events FROM (
        SELECT e FROM claimed, jsonb_array_elements(claimed.events) AS e
        EXCEPT
        SELECT e FROM mine, jsonb_array_elements(mine.events) AS e
    ) AS x
), stored AS (
    INSERT INTO caches_invalidation_outbox (created_at, origin, events, tx)
    SELECT %s, %s, mine.events || extra.events, NULL FROM mine, extra
    RETURNING id
)
SELECT stored.id, extra.events FROM stored, extra
"""


def _append_claiming(
    connection: Any, payload: list[Any], origin: str
) -> tuple[int, tuple[EventTuple, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM, [json.dumps(payload), timezone.now(), origin])
        row_id, extra = cursor.fetchone()
    extra = json.loads(extra) if isinstance(extra, str) else extra
    # The row holds the write's events, then these.
    return int(row_id), _events(row_id, extra)


def _claim_sqlite(using: str) -> tuple[EventTuple, ...]:
    from caches.outbox.capture import SQLITE_TX

    rows = list(
        _model().objects.using(using).filter(tx=SQLITE_TX).values_list("id", "events")
    )
    if not rows:
        return ()
    _model().objects.using(using).filter(id__in=[i for i, _ in rows]).delete()
    return tuple(event for i, raw in rows for event in _events(i, raw))


#: Ids below the last one issued that an empty table's reader still treats as
#: possibly in flight (a transaction that took its id but has not committed).
IN_FLIGHT_MARGIN = 1000


def newest_id(*, using: str = DEFAULT_DB_ALIAS) -> int:
    """Return the highest id stored; for an empty table, where new ids will start.

    An empty table (everything pruned, or truncated) does not restart its
    ids: starting a follower at 0 would make every id below the next row a
    gap, and thousands of gaps flush every cache. So it starts just below
    the last id issued, leaving `IN_FLIGHT_MARGIN` ids for writes in flight.
    """
    newest = _model().objects.using(using).order_by("-id").values_list("id").first()
    if newest:
        return int(newest[0])
    return max(0, _last_issued_id(using) - IN_FLIGHT_MARGIN)


def _last_issued_id(using: str) -> int:
    from django.db import connections

    connection = connections[using]
    table = _model()._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_sequence_last_value(pg_get_serial_sequence(%s, 'id'))",
                [table],
            )
        elif connection.vendor == "sqlite":
            cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
        else:
            return 0
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _rows(wanted: Any, using: str = DEFAULT_DB_ALIAS) -> QuerySet[Any, Any]:
    return (
        _model()
        .objects.using(using)
        .filter(wanted)
        .order_by("id")
        # As text: the JSON is parsed on first use (`StoredEvents`), on the
        # caches' loop in a worker, not by the thread that reads.
        .annotate(raw=Cast("events", TextField()))
        .values_list("id", "created_at", "raw", "origin")[:BATCH]
    )


#: A follower's usual poll (nothing missing below its high mark), compiled
#: once: it runs twice a second in every worker.
_ROWS_AFTER = CompiledRead(lambda high: _rows(Q(id__gt=high)), (int,))


def rows_after(
    high: int, gaps: Sequence[int] = (), *, using: str = DEFAULT_DB_ALIAS
) -> list[OutboxRow]:
    """Return up to BATCH rows with id above `high`, and any of the `gaps` ids, by id."""
    if gaps or using != DEFAULT_DB_ALIAS:
        rows: Iterable[Any] = _rows(Q(id__gt=high) | Q(id__in=list(gaps)), using)
    else:
        rows = _ROWS_AFTER.rows(high)
    return [
        OutboxRow(
            id=i,
            created_at=created.timestamp(),
            events=StoredEvents(i, raw),
            origin=origin,
        )
        for i, created, raw, origin in rows
    ]


class StoredEvents(Sequence[EventTuple]):
    """One outbox row's events, kept as the row's JSON text until used.

    `stream()` parses them as the caller takes them (a worker's loop applies
    a 30,000-event row a few dozen events a callback); the sequence methods
    parse them all, once. A malformed row yields the events before the
    fault, which is logged (invalidating more is always safe).
    """

    __slots__ = ("_parsed", "_raw", "_row_id")

    def __init__(self, row_id: int, raw: str | None) -> None:
        self._row_id = row_id
        self._raw = raw
        self._parsed: tuple[EventTuple, ...] | None = None

    def stream(self) -> Iterator[EventTuple]:
        """Yield the events, parsing each when it is asked for."""
        if self._parsed is not None:
            yield from self._parsed
            return
        try:
            yield from iter_events_text(self._raw or "")
        except MalformedMessage as exc:
            # Skipped, not retried: the rest will never parse; the log says which.
            logger.warning(
                "outbox: row %d holds malformed events (%s)", self._row_id, exc
            )

    def _events(self) -> tuple[EventTuple, ...]:
        if self._parsed is None:
            self._parsed = tuple(self.stream())
            self._raw = None
        return self._parsed

    def __len__(self) -> int:
        return len(self._events())

    @overload
    def __getitem__(self, index: int) -> EventTuple: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[EventTuple, ...]: ...
    def __getitem__(self, index: int | slice) -> EventTuple | tuple[EventTuple, ...]:
        return self._events()[index]

    def __iter__(self) -> Iterator[EventTuple]:
        return iter(self._events())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredEvents):
            other = other._events()
        return self._events() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StoredEvents(row {self._row_id}: {self._events()!r})"


def prune(*, older_than: dt.timedelta, using: str = DEFAULT_DB_ALIAS) -> int:
    """Delete rows older than `older_than`; return how many."""
    cutoff = timezone.now() - older_than
    deleted, _ = _model().objects.using(using).filter(created_at__lt=cutoff).delete()
    return int(deleted)


def _events(row_id: int, raw: Any) -> tuple[EventTuple, ...]:
    try:
        return events_from_json(raw)
    except MalformedMessage as exc:
        # Skipped, not retried: the row will never parse; the log says which.
        logger.warning("outbox: row %d holds malformed events (%s)", row_id, exc)
        return ()
