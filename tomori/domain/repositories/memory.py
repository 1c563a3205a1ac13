"""Reads and writes of the durable part of short-term memory (ShortTermMemoryRecord).

Only summaries, categories and turn counters are stored; raw messages stay in
the cache. The cache layer (`caches.layers.short_term_memory`) queues writes
and applies them here in ordered batches, one transaction per batch.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any

import psycopg
from django.db import connection, transaction
from django.db.models import F, Field, Q, QuerySet
from django.db.models.functions import Mod

from tomori.domain.models import MemoryScope, ShortTermMemoryRecord
from tomori.domain.repositories.compiled import CompiledRead

_UPDATE_FIELDS = [
    "scope",
    "user_disc_id",
    "server_disc_id",
    "channel_disc_id",
    "persona_id",
    "summary",
    "categories",
    "turn_count",
    "summarized_turn_count",
    "updated_at",
]
#: Every column of a row, in order: the key, then what an upsert's conflict updates.
_COLUMNS = ["cache_key", *_UPDATE_FIELDS]


@dataclass(frozen=True, slots=True)
class DurableMemory:
    """The durable fields of one short-term memory entry."""

    cache_key: str
    scope: str
    channel_disc_id: int
    user_disc_id: int | None
    server_disc_id: int | None
    persona_id: int | None
    summary: str
    categories: tuple[str, ...]
    turn_count: int
    summarized_turn_count: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class DeleteKeys:
    """Delete the rows of these cache keys."""

    cache_keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteWhere:
    """Delete the rows matching every given field (None: any value)."""

    scope: str | None = None
    user_disc_id: int | None = None
    server_disc_id: int | None = None
    channel_disc_id: int | None = None

    def as_q(self) -> Q:
        """Return the filter; refuse an empty one, which would delete everything."""
        fields = {
            name: value
            for name, value in (
                ("scope", self.scope),
                ("user_disc_id", self.user_disc_id),
                ("server_disc_id", self.server_disc_id),
                ("channel_disc_id", self.channel_disc_id),
            )
            if value is not None
        }
        if not fields:
            raise ValueError("DeleteWhere needs at least one field")
        return Q(**fields)


MemoryWrite = DurableMemory | DeleteKeys | DeleteWhere


def _to_durable(row: ShortTermMemoryRecord) -> DurableMemory:
    return DurableMemory(
        cache_key=row.cache_key,
        scope=row.scope,
        channel_disc_id=row.channel_disc_id,
        user_disc_id=row.user_disc_id,
        server_disc_id=row.server_disc_id,
        persona_id=row.persona_id,
        summary=row.summary,
        categories=tuple(row.categories or ()),
        turn_count=row.turn_count,
        summarized_turn_count=row.summarized_turn_count,
        updated_at=row.updated_at,
    )


#: A hydration's query, compiled once (see `compiled`): a row by its unique key.
_RECORD_BY_KEY = CompiledRead(
    lambda cache_key: ShortTermMemoryRecord.objects.filter(
        cache_key=cache_key
    ).values_list(*_COLUMNS),
    (str,),
)


def get_memory_record(
    cache_key: str, *, updated_since: datetime
) -> DurableMemory | None:
    """Return the durable fields of one key if written since `updated_since`."""
    rows = _RECORD_BY_KEY.rows(cache_key)
    if not rows:
        return None
    fields = dict(zip(_COLUMNS, rows[0], strict=True))
    if fields["updated_at"] < updated_since:
        return None
    fields["categories"] = tuple(fields["categories"] or ())
    return DurableMemory(**fields)


def list_memory_records_for_server(
    server_disc_id: int, *, updated_since: datetime
) -> list[DurableMemory]:
    """Return the server-scoped records of a server written since `updated_since`."""
    rows = ShortTermMemoryRecord.objects.filter(
        scope=MemoryScope.SERVER,
        server_disc_id=server_disc_id,
        updated_at__gte=updated_since,
    )
    return [_to_durable(row) for row in rows]


def list_memory_records_for_user(
    user_disc_id: int, *, updated_since: datetime
) -> list[DurableMemory]:
    """Return the user-scoped records of a user written since `updated_since`."""
    rows = ShortTermMemoryRecord.objects.filter(
        scope=MemoryScope.USER, user_disc_id=user_disc_id, updated_at__gte=updated_since
    )
    return [_to_durable(row) for row in rows]


#: The shards whose rows a worker reads: (its shard ids, the shard count);
#: None: every row (an unsharded worker).
Shards = tuple[tuple[int, ...], int] | None


def _written_since(updated_since: datetime, shards: Shards) -> QuerySet[Any]:
    """Return the rows written since `updated_since` of the given shards' guilds.

    A guild's shard is (its id >> 22) % the shard count, as Discord assigns
    it; rows without a server (direct messages) are shard 0's.
    """
    rows = ShortTermMemoryRecord.objects.filter(updated_at__gte=updated_since)
    if shards is None:
        return rows
    shard_ids, count = shards
    rows = rows.alias(shard=Mod(F("server_disc_id").bitrightshift(22), count))
    mine = Q(shard__in=shard_ids)
    if 0 in shard_ids:
        mine |= Q(server_disc_id__isnull=True)
    return rows.filter(mine)


def count_memory_keys(*, updated_since: datetime, shards: Shards = None) -> int:
    """Return how many rows were written since `updated_since` (of these shards)."""
    return _written_since(updated_since, shards).count()


def memory_keys_page(
    *, updated_since: datetime, after: str, limit: int, shards: Shards = None
) -> list[str]:
    """Return up to `limit` keys greater than `after`, in order, of rows written since."""
    rows = _written_since(updated_since, shards).filter(cache_key__gt=after)
    return list(rows.order_by("cache_key").values_list("cache_key", flat=True)[:limit])


def apply_memory_writes(writes: Sequence[MemoryWrite]) -> None:
    """Apply upserts and deletes in order, in one transaction.

    Each run of upserts is one INSERT .. ON CONFLICT statement and each run of
    key deletes one DELETE, so a batch of coalesced writes costs a statement
    or two, not one per key. A batch of one statement (the usual one: a busy
    bot's upserts) runs without BEGIN and COMMIT: a statement is atomic by
    itself, and those are two round trips more than the statement.
    """
    statements = _statements(writes)
    if len(statements) == 1:
        statements[0]()
        return
    with transaction.atomic():
        for statement in statements:
            statement()


def _statements(writes: Sequence[MemoryWrite]) -> list[Callable[[], None]]:
    """Return the statements that apply `writes` in order: runs of one kind share one."""
    statements: list[Callable[[], None]] = []
    upserts: list[DurableMemory] = []
    keys: list[str] = []

    def close_runs() -> None:
        if upserts:
            statements.append(functools.partial(_upsert, upserts[:]))
            upserts.clear()
        if keys:
            statements.append(functools.partial(_delete_keys, keys[:]))
            keys.clear()

    for write in writes:
        if isinstance(write, DurableMemory):
            if keys:
                close_runs()
            upserts.append(write)
        elif isinstance(write, DeleteKeys):
            if upserts:
                close_runs()
            keys.extend(write.cache_keys)
        else:
            close_runs()
            statements.append(functools.partial(_delete_where, write))
    close_runs()
    return statements


def _delete_where(where: DeleteWhere) -> None:
    ShortTermMemoryRecord.objects.filter(where.as_q()).delete()


def _upsert(records: list[DurableMemory]) -> None:
    """Write `records` (one statement)."""
    if connection.vendor == "postgresql":
        _upsert_columns(records)
    else:
        _upsert_rows(records)


def _upsert_columns(records: list[DurableMemory]) -> None:
    """Write `records` on PostgreSQL: one INSERT .. SELECT FROM unnest(column arrays).

    Each column goes as one array, bound server-side in binary: psycopg's C
    dumpers adapt the values, so the write thread holds the GIL about 2 ms
    for 600 rows, against 22-33 ms through `bulk_create` (a model instance
    and each field's prep per row, then client-side quoting of every value),
    which the event loop waited on (benchmarks/pipeline.py, write-behind on).
    """
    columns = [[get(r) for r in records] for get in _GETTERS]
    columns[_CATEGORIES] = [json.dumps(list(c)) for c in columns[_CATEGORIES]]
    connection.close_if_health_check_failed()  # what connection.cursor() does
    connection.ensure_connection()
    binding: Any = psycopg.Cursor(connection.connection)  # server-side binding
    # Through Django's cursor wrapper: its execute wrappers, query logging
    # and database error translation apply as to any other statement.
    wrapper = (
        connection.make_debug_cursor(binding)
        if connection.queries_logged
        else connection.make_cursor(binding)
    )
    with wrapper as cursor:
        cursor.execute(_columns_upsert_sql(), columns)


_GETTERS = [attrgetter(name) for name in _COLUMNS]
_CATEGORIES = _COLUMNS.index("categories")


@functools.cache
def _columns_upsert_sql() -> str:
    """Return the unnest upsert, its columns and array types from the model's fields."""
    meta = ShortTermMemoryRecord._meta
    quote = connection.ops.quote_name
    fields: list[Field[Any, Any]] = [meta.get_field(name) for name in _COLUMNS]  # type: ignore[misc]
    names = [quote(field.column) for field in fields]
    is_json = [field.get_internal_type() == "JSONField" for field in fields]
    # Character columns go as text[]: a cast to varchar(n) would cut an
    # over-long value silently, where the insert itself refuses it.
    textual = {"CharField", "TextField", "JSONField"}
    types = [
        "text" if f.get_internal_type() in textual else str(f.db_type(connection))
        for f in fields
    ]
    arrays = ", ".join(f"%b::{kind}[]" for kind in types)
    picked = ", ".join(
        f"{name}::jsonb" if json_ else name
        for name, json_ in zip(names, is_json, strict=True)
    )
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in names[1:])
    return (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(names)}) "
        f"SELECT {picked} FROM unnest({arrays}) AS given ({', '.join(names)}) "
        f"ON CONFLICT ({names[0]}) DO UPDATE SET {updates}"
    )


def _upsert_rows(records: list[DurableMemory]) -> None:
    """Write `records` through the ORM (SQLite, the embedded default)."""
    rows = [
        ShortTermMemoryRecord(
            cache_key=r.cache_key,
            scope=r.scope,
            user_disc_id=r.user_disc_id,
            server_disc_id=r.server_disc_id,
            channel_disc_id=r.channel_disc_id,
            persona_id=r.persona_id,
            summary=r.summary,
            categories=list(r.categories),
            turn_count=r.turn_count,
            summarized_turn_count=r.summarized_turn_count,
            updated_at=r.updated_at,
        )
        for r in records
    ]
    ShortTermMemoryRecord.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["cache_key"],
        update_fields=_UPDATE_FIELDS,
    )


def _delete_keys(keys: list[str]) -> None:
    """Delete the rows of `keys` (one statement)."""
    ShortTermMemoryRecord.objects.filter(cache_key__in=keys).delete()


def purge_memory_records(*, older_than: datetime) -> int:
    """Delete records last written before `older_than`; return how many."""
    deleted, _ = ShortTermMemoryRecord.objects.filter(
        updated_at__lt=older_than
    ).delete()
    return deleted
