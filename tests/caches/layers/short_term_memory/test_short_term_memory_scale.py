"""Short-term memory at scale: the lean write, index-backed clears, one-statement batches."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from caches.layers import short_term_memory as stm
from caches.layers.short_term_memory import ShortTermMemoryStore
from caches.layers.short_term_memory.durable import DurableWriter, where_matches
from caches.layers.short_term_memory.entry import ShortTermMemoryEntry
from caches.layers.short_term_memory.store import CHANNEL, OWNER
from tests.caches.layers.short_term_memory.stm_helpers import (
    db,
    durable_rows,
    message,
    remember,
)
from tomori.domain.repositories import memory as repo
from tomori.domain.repositories.memory import DeleteKeys, DeleteWhere, DurableMemory

USER, OTHER_USER, SERVER, OTHER_SERVER = 101, 102, 201, 202


def _entry(**fields: object) -> ShortTermMemoryEntry:
    values: dict[str, object] = {
        "key": "shortterm:server:201:301:7",
        "scope": "server",
        "channel_disc_id": 301,
        "last_updated": timezone.now(),
        "server_disc_id": SERVER,
        "persona_id": 7,
        "persona_lineage": (7, 1),
        "channel_name": "general",
        "summary": "a summary",
        "categories": ("x",),
        "turn_count": 4,
        "summarized_turn_count": 3,
    }
    values.update(fields)
    return ShortTermMemoryEntry(**values)  # type: ignore[arg-type]


def test_with_turn_builds_what_evolve_would() -> None:
    base = _entry()
    later = base.last_updated + timedelta(seconds=5)
    changes = {
        "messages": (message("hi"),),
        "last_updated": later,
        "persona_lineage": (7,),
        "channel_name": "renamed",
        "server_name": "guild",
        "parent_channel_disc_id": 300,
        "categories": ("y", "z"),
    }
    fast = base.with_turn(**changes)  # type: ignore[arg-type]
    slow = base.evolve(turn_count=base.turn_count + 1, **changes)
    assert type(fast) is ShortTermMemoryEntry
    assert dataclasses.asdict(fast) | {"revision": 0} == dataclasses.asdict(slow) | {
        "revision": 0
    }
    assert fast == slow and hash(fast) == hash(slow)
    assert fast.revision > base.revision
    assert base.turn_count == 4  # the base is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.summary = "changed"  # type: ignore[misc]


def test_an_entry_matches_a_delete_as_its_row_would() -> None:
    entries = [
        _entry(),
        _entry(key="shortterm:user:101:301", scope="user", user_disc_id=USER),
        # A server entry never names a user in its row, whatever it holds.
        _entry(user_disc_id=USER),
    ]
    deletes = [
        DeleteWhere(scope="server", server_disc_id=SERVER),
        DeleteWhere(user_disc_id=USER),
        DeleteWhere(channel_disc_id=301),
        DeleteWhere(scope="user", user_disc_id=USER),
        DeleteWhere(server_disc_id=OTHER_SERVER),
    ]
    for entry in entries:
        for where in deletes:
            assert where_matches(where, entry) == where_matches(where, entry.durable())


def recording_writer(**kwargs: Any) -> tuple[DurableWriter, list[list[object]]]:
    """Return a writer whose batches are recorded in the list beside it (no database)."""
    applied: list[list[object]] = []

    async def call(apply, writes):  # type: ignore[no-untyped-def]
        apply(writes)

    writer = DurableWriter(
        lambda writes: applied.append(list(writes)), call=call, **kwargs
    )
    return writer, applied


async def test_an_entry_stored_many_times_waits_as_one_write() -> None:
    writer, applied = recording_writer()
    entries = [_entry(turn_count=n) for n in range(5)]
    for entry in entries:
        writer.submit_entry(entry, turns=1)
    assert writer.pending_count() == 1 and writer.turns_behind() == 5
    assert writer.overlay(entries[0].key, None) == entries[-1].durable()
    await writer.flush()
    assert applied == [[entries[-1].durable()]]
    assert writer.turns_behind() == 0


async def test_the_read_fence_keeps_a_stored_batch_while_a_read_begun_before_it_is_open() -> (
    None
):
    writer, applied = recording_writer(gather=0)
    first, second = _record(1), _record(2)
    outer = writer.reading()
    outer.__enter__()
    writer.submit(first)
    await writer.flush()  # stored while the outer read is open
    inner = writer.reading()
    inner.__enter__()
    writer.submit(second)
    await writer.flush()
    assert applied == [[first], [second]]
    # Nothing is queued or in flight, yet both reads may have missed them.
    assert writer.overlay(first.cache_key, None) == first
    assert writer.overlay(second.cache_key, None) == second
    outer.__exit__(None, None, None)
    # The inner read began after `first` was stored: only `second` is kept.
    assert writer.overlay(first.cache_key, None) is None
    assert writer.overlay(second.cache_key, None) == second
    inner.__exit__(None, None, None)
    assert writer.overlay(second.cache_key, None) is None
    writer.submit(dataclasses.replace(first, turn_count=9))
    await writer.flush()  # stored with no read open: nothing to keep
    assert writer.overlay(first.cache_key, None) is None


async def test_one_drain_task_serves_a_stream_of_turns_and_a_flush_ends_it() -> None:
    """Writes queued while the drain task lingers wake it: no task per store."""
    writer, applied = recording_writer(gather=0)
    first = _entry(turn_count=1)
    writer.submit_entry(first, turns=1)
    task = writer._task
    assert task is not None
    for _ in range(3):
        await asyncio.sleep(0)
    assert applied == [[first.durable()]]
    assert writer._idle is not None and not task.done()  # parked, not ended
    later = _entry(key="shortterm:server:201:302:7", channel_disc_id=302)
    writer.submit_entries([later], turns=1)
    assert writer._task is task  # the parked task takes it
    for _ in range(3):
        await asyncio.sleep(0)
    assert applied[-1] == [later.durable()] and writer.pending_count() == 0
    await writer.flush()
    assert task.done() and writer._idle is None


async def test_a_woken_drain_task_gathers_the_next_turns_into_one_batch() -> None:
    """After an idle spell, writes of the next turns share one batch; a flush ends the wait."""
    # A gathering window no test outlives: only the flush can end it.
    writer, applied = recording_writer(gather=3600)
    first = _entry(turn_count=1)
    writer.submit_entry(first, turns=1)
    for _ in range(3):
        await asyncio.sleep(0)
    assert applied == [[first.durable()]]  # a fresh task takes its batch at once
    later = [
        _entry(key=f"shortterm:server:201:{300 + n}:7", channel_disc_id=300 + n)
        for n in range(3)
    ]
    for entry in later:  # three turns, the loop running between them
        writer.submit_entries([entry], turns=1)
        for _ in range(3):
            await asyncio.sleep(0)
    assert len(applied) == 1 and writer._gathering is not None
    await writer.flush()
    assert applied[1:] == [[entry.durable() for entry in later]]
    assert writer.pending_count() == 0 and writer.batches == 2


def test_stored_timestamps_are_what_django_now_returns() -> None:
    from caches.core.clock import utc_now

    ours, django_now = utc_now(), timezone.now()
    assert ours.tzinfo is not None and ours.utcoffset() == django_now.utcoffset()
    assert abs((django_now - ours).total_seconds()) < 60


async def _fill() -> set[str]:
    """Store entries across users, servers, channels and personas; return the keys."""
    await remember(USER, SERVER, 301, "a")
    await remember(USER, SERVER, 301, "a7", persona_id=7)
    await remember(USER, SERVER, 302, "b")
    await remember(OTHER_USER, SERVER, 301, "c")
    await remember(OTHER_USER, SERVER, 301, "c8", persona_id=8)
    await remember(USER, OTHER_SERVER, 401, "d")
    await remember(USER, None, 501, "dm")
    await remember(OTHER_USER, None, 301, "dm: the same user key as in the guild")
    return set(stm.short_term_memory_store().cache.keys())


def _check_index(store: ShortTermMemoryStore) -> None:
    """The core's indexes list exactly what a scan of the keys finds."""
    keys = store.cache.keys()
    for key in keys:
        parts = key.split(":")
        owners = store.cache.keys_in_scope(OWNER, (parts[1], parts[2]))
        assert set(owners) == {k for k in keys if k.split(":")[1:3] == parts[1:3]}
        channel = store.cache.keys_in_scope(CHANNEL, parts[3])
        assert set(channel) == {k for k in keys if k.split(":")[3] == parts[3]}
    # Every indexed owner holds one shared object per scope word.
    words = {id(scope) for scope, _owner in store.cache.scope_members(OWNER)}
    assert len(words) == len({scope for scope, _ in store.cache.scope_members(OWNER)})


@db
async def test_a_user_clear_drops_exactly_the_users_own_keys(stm_store) -> None:
    before = await _fill()
    expected = {k for k in before if k.startswith(f"shortterm:user:{USER}:")}
    assert stm.clear_short_term_memory_for_user(USER) == len(expected) == 5
    assert set(stm_store.cache.keys()) == before - expected
    _check_index(stm_store)
    await stm.flush_pending_writes()
    assert {row.cache_key for row in await durable_rows()} == before - expected


@db
async def test_a_channel_clear_drops_every_scope_and_persona_of_it(stm_store) -> None:
    before = await _fill()
    expected = {k for k in before if k.split(":")[3] == "301"}
    assert stm.clear_short_term_memory_for_channel(301) == len(expected) == 7
    assert set(stm_store.cache.keys()) == before - expected
    _check_index(stm_store)
    await stm.flush_pending_writes()
    assert {row.cache_key for row in await durable_rows()} == before - expected


@db
async def test_a_shared_channel_clear_keeps_user_keys_and_other_servers(
    stm_store,
) -> None:
    before = await _fill()
    expected = {
        f"shortterm:server:{SERVER}:301",
        f"shortterm:server:{SERVER}:301:7",
        f"shortterm:server:{SERVER}:301:8",
    }
    assert expected <= before
    removed = stm.clear_short_term_memory_for_server_channel(
        SERVER, 301, all_personas=True
    )
    assert removed == 3
    assert set(stm_store.cache.keys()) == before - expected
    _check_index(stm_store)
    await stm.flush_pending_writes()
    assert {row.cache_key for row in await durable_rows()} == before - expected


@db
async def test_listings_and_indexes_follow_evictions_at_the_cap(stm_store) -> None:
    store = ShortTermMemoryStore(maxsize=4)
    for channel in range(1, 7):
        await store.store(
            user_disc_id=USER, channel_disc_id=channel, messages=[message("m")]
        )
    assert sorted(store.cache.keys()) == [
        f"shortterm:user:{USER}:{channel}" for channel in range(3, 7)
    ]
    _check_index(store)
    assert [e.channel_disc_id for e in store._live_entries(("user", USER))] != []
    listed = await store.list_scope("user", USER)
    # The scope's hydration (six rows into a cap of four) evicts as it goes;
    # whatever stays resident, the listing and the index agree with the cache.
    assert {e.key for e in listed} <= set(store.cache.keys())
    _check_index(store)
    await store.writer.flush()


def _statements(queries: CaptureQueriesContext) -> list[str]:
    """Return the captured data statements (not the transaction's BEGIN/COMMIT)."""
    control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE")
    sqls = [q["sql"] for q in queries.captured_queries]
    return [sql for sql in sqls if not sql.startswith(control)]


def _record(n: int) -> DurableMemory:
    return DurableMemory(
        cache_key=f"shortterm:user:{USER}:{n + 1}",
        scope="user",
        channel_disc_id=n + 1,
        user_disc_id=USER,
        server_disc_id=None,
        persona_id=None,
        summary=f"summary {n}",
        categories=("c",),
        turn_count=n,
        summarized_turn_count=0,
        updated_at=timezone.now(),
    )


@pytest.mark.django_db(transaction=True)
def test_a_batch_of_upserts_is_one_statement() -> None:
    repo.apply_memory_writes([_record(n) for n in range(80)])
    changed = [dataclasses.replace(_record(n), turn_count=100 + n) for n in range(80)]
    fresh = [_record(n) for n in range(80, 160)]
    with CaptureQueriesContext(connection) as queries:
        repo.apply_memory_writes(changed + fresh)
    statements = _statements(queries)
    # Stated for PostgreSQL: SQLite splits an INSERT at 999 variables
    # (90 rows of 11 fields), still one transaction.
    if connection.vendor == "postgresql":
        assert len(statements) == 1, statements
        assert statements[0].startswith("INSERT") and "ON CONFLICT" in statements[0]
    from tomori.domain.models import ShortTermMemoryRecord

    counts = dict(
        ShortTermMemoryRecord.objects.values_list("channel_disc_id", "turn_count")
    )
    assert counts == {n + 1: (100 + n if n < 80 else n) for n in range(160)}


def _varied(n: int, key: str) -> DurableMemory:
    """Return a record whose fields take every shape a column holds (None, JSON, text)."""
    return DurableMemory(
        cache_key=f"shortterm:{key}:{n}",
        scope="server" if n % 2 else "user",
        channel_disc_id=2**62 + n,
        user_disc_id=None if n % 2 else 2**63 - 1 - n,
        server_disc_id=2**40 + n if n % 2 else None,
        persona_id=n if n % 3 == 0 else None,
        summary=["", "plain", "quote ' \" \\ é 🎉\nline", "{1,2}"][n % 4],
        categories=(("a", "b,c", '{"x"}') if n % 2 else ()),
        turn_count=2**31 - 1 - n,
        summarized_turn_count=n,
        updated_at=VARIED_AT - timedelta(seconds=n, microseconds=n),
    )


VARIED_AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _stored(prefix: str) -> dict[int, tuple[Any, ...]]:
    from tomori.domain.models import ShortTermMemoryRecord

    rows = ShortTermMemoryRecord.objects.filter(cache_key__startswith=prefix)
    return {
        int(row.cache_key.rsplit(":", 1)[1]): (
            row.scope,
            row.channel_disc_id,
            row.user_disc_id,
            row.server_disc_id,
            row.persona_id,
            row.summary,
            row.categories,
            row.turn_count,
            row.summarized_turn_count,
            row.updated_at,
        )
        for row in rows
    }


@pytest.mark.django_db(transaction=True)
def test_the_column_upsert_stores_what_the_orm_upsert_stores(postgres: None) -> None:
    """PostgreSQL's unnest upsert and the ORM's (SQLite's path) leave equal rows."""
    for writer, key in ((repo._upsert_columns, "columns"), (repo._upsert_rows, "orm")):
        writer([_varied(n, key) for n in range(12)])
        # Server rows without personas: user_disc_id and persona_id all None.
        writer([_varied(n, key) for n in (13, 17, 19)])
        # A conflict updates every field but the key.
        writer(
            [
                dataclasses.replace(
                    _varied(n + 1, key), cache_key=_varied(n, key).cache_key
                )
                for n in range(4)
            ]
        )
    columns, orm = _stored("shortterm:columns:"), _stored("shortterm:orm:")
    assert len(columns) == 15 and columns == orm
    assert columns[13][2] is None and columns[13][4] is None
    assert columns[0][6] == list(_varied(1, "x").categories)  # updated from record 1


@pytest.mark.django_db(transaction=True)
def test_runs_of_upserts_and_deletes_cost_a_statement_each() -> None:
    writes = [
        _record(1),
        _record(2),
        DeleteKeys((_record(1).cache_key,)),
        DeleteKeys((_record(3).cache_key,)),
        _record(3),
        _record(4),
    ]
    with CaptureQueriesContext(connection) as queries:
        repo.apply_memory_writes(writes)
    kinds = [sql.split()[0] for sql in _statements(queries)]
    assert kinds == ["INSERT", "DELETE", "INSERT"]
    from tomori.domain.models import ShortTermMemoryRecord

    keys = set(ShortTermMemoryRecord.objects.values_list("channel_disc_id", flat=True))
    assert keys == {3, 4, 5}  # channels of records 2, 3 and 4


def test_fresh_entry_is_what_the_constructor_builds() -> None:
    from caches.layers.short_term_memory.entry import fresh_entry

    now = timezone.now()
    built = fresh_entry("shortterm:user:101:301:7", "user", 301, now, USER, None, 7)
    expected = ShortTermMemoryEntry(
        key="shortterm:user:101:301:7",
        scope="user",
        channel_disc_id=301,
        last_updated=now,
        user_disc_id=USER,
        persona_id=7,
        persona_lineage=(7,),
    )
    assert type(built) is ShortTermMemoryEntry
    assert dataclasses.asdict(built) == dataclasses.asdict(expected)


# ------------------------------------------------------------ one-pass turn


def _recording(*contents: str) -> tuple[list[object], object]:
    """Return (the conversations it was called with, a messages_for callback)."""
    seen: list[object] = []

    def messages_for(conversation):  # type: ignore[no-untyped-def]
        seen.append(conversation)
        return tuple(message(c) for c in contents)

    return seen, messages_for


@db
async def test_a_turn_reads_both_entries_then_stores_over_them(stm_store) -> None:
    user0 = await remember(USER, SERVER, 301, "earlier")
    server0 = stm_store.cache.peek(user0.key.replace("user:101", "server:201"))
    hits, misses = stm_store.cache.hits, stm_store.cache.misses
    seen, messages_for = _recording("earlier", "now")
    before = await stm.short_term_memory_store().turn(
        user_disc_id=USER,
        channel_disc_id=301,
        server_disc_id=SERVER,
        persona_id=7,
        messages_for=messages_for,  # type: ignore[arg-type]
        channel_name="general",
        server_name="guild",
    )
    # persona 7's keys were never stored: both read as nothing, then written
    assert before == (None, None) and seen == [None]
    user7 = await stm.get_short_term_memory_for_user_channel(USER, 301, persona_id=7)
    assert user7 is not None and user7.persona_lineage == (7,)
    assert [m.content for m in user7.messages] == ["earlier", "now"]
    assert (user7.turn_count, user7.channel_name, user7.server_name) == (
        1,
        "general",
        "guild",
    )
    # the persona-less keys: read as stored, the server entry is the conversation
    seen, messages_for = _recording("again")
    before = await stm.short_term_memory_store().turn(
        user_disc_id=USER,
        channel_disc_id=301,
        server_disc_id=SERVER,
        messages_for=messages_for,  # type: ignore[arg-type]
    )
    assert before == (user0, server0) and seen == [server0]
    after = await stm.get_short_term_memory_for_server_channel(SERVER, 301)
    assert after is not None and after.turn_count == server0.turn_count + 1
    assert [m.content for m in after.messages] == ["again"]
    # each resident key read counts one hit, as a get would; nothing missed
    # but the two never-stored persona keys
    assert stm_store.cache.misses - misses == 2
    assert stm_store.cache.hits - hits == 1 + 2 + 1  # get, turn, get


@db
async def test_a_dm_turn_converses_with_the_user_entry_only(stm_store) -> None:
    user0 = await remember(USER, None, 301, "hello")
    seen, messages_for = _recording("reply")
    before = await stm.short_term_memory_store().turn(
        user_disc_id=USER,
        channel_disc_id=301,
        messages_for=messages_for,  # type: ignore[arg-type]
    )
    assert before == (user0, None) and seen == [user0]
    assert len(stm_store) == 1  # no server key in a DM


@db
async def test_a_turn_after_a_restart_hydrates_then_counts_on(stm_store) -> None:
    await remember(USER, SERVER, 301, "one")
    await stm.update_short_term_memory_summary(
        channel_disc_id=301, user_disc_id=USER, server_disc_id=SERVER, summary="cats"
    )
    await stm_store.writer.flush()
    stm_store.clear()  # a restart: only the table remembers
    seen, messages_for = _recording("two")
    before = await stm.short_term_memory_store().turn(
        user_disc_id=USER,
        channel_disc_id=301,
        server_disc_id=SERVER,
        messages_for=messages_for,  # type: ignore[arg-type]
    )
    assert before.user is not None and before.user.summary == "cats"
    assert before.server is not None and seen == [before.server]
    assert before.server.messages == ()  # raw messages are memory-only
    entry = await stm.get_short_term_memory_for_user_channel(USER, 301)
    assert entry is not None and (entry.summary, entry.turn_count) == ("cats", 2)


@db
async def test_a_turn_without_capture_reads_and_stores_nothing(stm_store) -> None:
    user0 = await remember(USER, SERVER, 301, "one")
    before = await stm.short_term_memory_store().turn(
        user_disc_id=USER, channel_disc_id=301, server_disc_id=SERVER
    )
    assert before.user == user0 and before.user is not None
    assert (await stm.get_short_term_memory_for_user_channel(USER, 301)) == user0
