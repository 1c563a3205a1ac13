"""Short-term memory's durable part: write-behind, restart, hydration races, janitor."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError
from django.utils import timezone

from caches.database import run_db
from caches.layers import short_term_memory as stm
from caches.layers.short_term_memory import (
    ShortTermMemoryStore,
    hydration,
    server_short_term_memory_key,
    user_short_term_memory_key,
)
from caches.layers.short_term_memory.durable import DurableWriter
from tests.caches.layers.short_term_memory.stm_helpers import (
    counting,
    db,
    durable_rows,
    message,
    remember,
)
from tests.support.faults import until
from tomori.domain.knobs import knobs
from tomori.domain.models import ShortTermMemoryRecord
from tomori.domain.repositories import memory as repo
from tomori.domain.repositories.memory import DeleteWhere
from tomori.tasks import purge_short_term_memory

USER, SERVER, CHANNEL = 101, 201, 301


def _restarted() -> ShortTermMemoryStore:
    """Return a store with an empty cache over the same database (a new process)."""
    return ShortTermMemoryStore(maxsize=100)


def _gated(monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[asyncio.Event, ...]:
    """Hold hydration after repo.`name` has read, until released.

    The hold is on the event loop side, so the database thread stays free
    for the live writes the test makes meanwhile.
    """
    entered, release = asyncio.Event(), asyncio.Event()
    target = getattr(repo, name)
    real_run_db = hydration.run_db

    async def gated_run_db(fn, *args, **kwargs):
        result = await real_run_db(fn, *args, **kwargs)
        if fn is target:
            entered.set()
            await release.wait()
        return result

    monkeypatch.setattr(hydration, "run_db", gated_run_db)
    return entered, release


@db
async def test_a_hydration_read_overlays_a_batch_stored_while_it_was_open(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches are stored from their own thread: the read's answer may predate one."""
    entry = await remember(USER, SERVER, CHANNEL, "hello")
    await stm_store.writer.flush()
    stm_store.cache.clear()  # the row stays; the next read hydrates it
    entered, release = _gated(monkeypatch, "get_memory_record")
    load = asyncio.create_task(stm_store.get(entry.key))
    await asyncio.wait_for(entered.wait(), 10)  # it read turn_count 1
    stm_store.writer.submit(dataclasses.replace(entry.durable(), turn_count=5))
    await asyncio.wait_for(stm_store.writer.flush(), 10)  # stored, not in flight
    release.set()
    hydrated = await asyncio.wait_for(load, 10)
    assert hydrated is not None and hydrated.turn_count == 5


@db
async def test_a_read_does_not_wait_behind_a_durable_batch(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, release = threading.Event(), threading.Event()
    store_batch = stm_store.writer._apply

    def held_batch(writes):  # type: ignore[no-untyped-def]
        held.set()  # on the write-behind's thread, mid-batch
        release.wait(10)
        store_batch(writes)

    monkeypatch.setattr(stm_store.writer, "_apply", held_batch)
    await remember(USER, SERVER, CHANNEL, "hello")
    flushing = asyncio.create_task(stm_store.writer.flush())
    try:
        assert await asyncio.to_thread(held.wait, 10)
        # A cache miss's query answers while the batch is held (one shared
        # thread made it wait for the batch: DatabaseUnavailable after
        # DB_CALL_TIMEOUT_SECONDS).
        assert await run_db(ShortTermMemoryRecord.objects.count) == 0
    finally:
        release.set()
    await asyncio.wait_for(flushing, 10)
    assert len(await durable_rows()) == 2


async def _summarize(text: str, channel: int = CHANNEL) -> None:
    await stm.update_short_term_memory_summary(
        channel_disc_id=channel,
        user_disc_id=USER,
        server_disc_id=SERVER,
        summary=text,
        categories=["c"],
    )


@db
async def test_summary_survives_a_restart_but_raw_messages_do_not(stm_store) -> None:
    await remember(USER, SERVER, CHANNEL, "raw words")
    await _summarize("durable summary")
    await stm.flush_pending_writes()
    fresh = _restarted()
    entry = await fresh.get(user_short_term_memory_key(USER, CHANNEL))
    assert (entry.summary, entry.categories) == ("durable summary", ("c",))
    assert (entry.turn_count, entry.summarized_turn_count) == (1, 1)
    assert entry.messages == ()
    shared = await fresh.get(server_short_term_memory_key(SERVER, CHANNEL))
    assert shared.summary == "durable summary"


@db
async def test_store_after_restart_keeps_the_durable_summary(stm_store) -> None:
    await _summarize("before restart")
    await stm.flush_pending_writes()
    registry_clear = stm_store.clear()  # the cache is gone, the table is not
    assert registry_clear == 2
    entry = await remember(USER, SERVER, CHANNEL, "after restart")
    assert entry.summary == "before restart"
    assert [m.content for m in entry.messages] == ["after restart"]


@db
async def test_durable_writes_coalesce_and_flush(stm_store) -> None:
    writes_before = stm_store.writer.writes
    for i in range(10):
        await _summarize(f"summary {i}")
    assert stm_store.writer.pending_count() <= 4
    await stm.flush_pending_writes()
    assert stm_store.writer.pending_count() == 0
    rows = await durable_rows()
    assert [r.summary for r in rows] == ["summary 9", "summary 9"]
    assert stm_store.writer.writes - writes_before < 20


@db
async def test_a_failed_durable_batch_is_kept_and_retried_until_stored(
    stm_store,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    settings,
) -> None:
    settings.SHORT_TERM_MEMORY_RETRY_MAX_SECONDS = 0.01
    real, attempts = stm_store.writer._apply, []
    failures = stm_store.writer.failures  # the process's store: count from here

    def fails_twice(writes):
        attempts.append(len(writes))
        if len(attempts) <= 2:
            raise RuntimeError("INSERT ... VALUES ('secret summary')")
        real(writes)

    monkeypatch.setattr(stm_store.writer, "_apply", fails_twice)
    await remember(USER, SERVER, CHANNEL, "turn")
    await _summarize("secret summary")
    await asyncio.wait_for(stm.flush_pending_writes(), 10)
    assert stm_store.writer.failures - failures == 2
    assert stm_store.writer.pending_count() == 0
    assert "kept 2 durable writes after a failed batch (RuntimeError" in caplog.text
    assert "secret summary" not in caplog.text
    rows = await durable_rows()
    assert [(r.summary, r.turn_count) for r in rows] == [("secret summary", 1)] * 2


class _Refusing:
    """A database call that fails until `accept` is set; records what it was given."""

    def __init__(self) -> None:
        self.accept = False
        self.applied: list[list[object]] = []

    async def __call__(self, apply, writes) -> None:
        if not self.accept:
            raise OperationalError("connection refused")
        self.applied.append(list(writes))


def _row(key: str, turns: int) -> repo.DurableMemory:
    record = _record(key, timezone.now(), "")
    return dataclasses.replace(record, turn_count=turns)


async def test_kept_writes_coalesce_per_key_newest_wins_under_a_cap(
    caplog: pytest.LogCaptureFixture, settings
) -> None:
    settings.SHORT_TERM_MEMORY_RETRY_MAX_SECONDS = 0.01
    database = _Refusing()
    writer = DurableWriter(lambda writes: None, max_pending=3, call=database)
    for turns in (1, 2, 3):  # one key written three times while refused
        writer.submit(_row("shortterm:user:1:1", turns), turns=1)
        await until(lambda n=turns: writer.failures >= n)
    assert writer.pending_count() == 1 and writer.turns_behind() == 3
    for channel in (2, 3, 4, 5):
        writer.submit(_row(f"shortterm:user:1:{channel}", 1), turns=1)
    await until(lambda: writer.failures >= 5 and not writer._in_flight)
    assert writer.pending_count() == 3 and writer.dropped == 2
    assert "over 3 durable writes waiting for the database" in caplog.text
    database.accept = True
    await asyncio.wait_for(writer.flush(), 5)
    written = [(w.cache_key, w.turn_count) for batch in database.applied for w in batch]
    assert written == [
        ("shortterm:user:1:3", 1),
        ("shortterm:user:1:4", 1),
        ("shortterm:user:1:5", 1),
    ]
    assert writer.pending_count() == 0 and writer.turns_behind() == 0


async def test_a_newer_write_queued_during_a_failed_batch_wins_over_its_retry(
    settings,
) -> None:
    settings.SHORT_TERM_MEMORY_RETRY_MAX_SECONDS = 0.01
    database = _Refusing()
    writer = DurableWriter(lambda writes: None, call=database)
    writer.submit(_row("shortterm:user:1:1", 1), turns=1)
    writer.submit(DeleteWhere(channel_disc_id=9), turns=0)
    await until(lambda: writer.failures >= 1)
    writer.submit(_row("shortterm:user:1:1", 2), turns=1)  # after the batch failed
    database.accept = True
    await asyncio.wait_for(writer.flush(), 5)
    written = [w for batch in database.applied for w in batch]
    assert written[0] == DeleteWhere(channel_disc_id=9)
    assert [(w.cache_key, w.turn_count) for w in written[1:]] == [
        ("shortterm:user:1:1", 2)
    ]
    assert writer.turns_behind() == 0


@db
async def test_concurrent_read_misses_query_once(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _summarize("s")
    await stm.flush_pending_writes()
    calls = counting(monkeypatch, "get_memory_record")
    fresh = _restarted()
    key = user_short_term_memory_key(USER, CHANNEL)
    entries = await asyncio.gather(*(fresh.get(key) for _ in range(5)))
    assert len(calls) == 1
    assert {e.summary for e in entries} == {"s"}


@db
async def test_a_miss_without_a_row_is_remembered(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = counting(monkeypatch, "get_memory_record")
    for _ in range(3):
        assert await stm.get_short_term_memory_for_user_channel(USER, 999) is None
    assert len(calls) == 1


@db
async def test_listing_after_restart_loads_the_scope_once(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for channel in (1, 2, 3):
        await _summarize(f"s{channel}", channel=channel)
    await stm.flush_pending_writes()
    calls = counting(monkeypatch, "list_memory_records_for_server")
    fresh = _restarted()
    first = await fresh.list_scope("server", SERVER)
    again = await fresh.list_scope("server", SERVER)
    assert len(calls) == 1
    assert sorted(e.summary for e in first) == ["s1", "s2", "s3"]
    assert len(again) == 3


@db
async def test_live_write_wins_over_a_late_scope_hydration(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await remember(USER, SERVER, CHANNEL, "old")
    await stm.flush_pending_writes()
    stm_store.clear()  # restart: the table says turn_count=1, no messages
    entered, release = _gated(monkeypatch, "list_memory_records_for_server")
    listing = asyncio.create_task(stm.get_short_term_memories_for_server(SERVER))
    await entered.wait()  # the scope query has read the old row
    live = await remember(USER, SERVER, CHANNEL, "new")
    release.set()
    await listing
    entry = await stm.get_short_term_memory_for_server_channel(SERVER, CHANNEL)
    assert entry.messages[0].content == "new" and entry.turn_count == 2
    assert live.turn_count == 2


@db
async def test_clear_during_a_key_hydration_is_not_undone(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _summarize("to forget")
    await stm.flush_pending_writes()
    stm_store.clear()
    entered, release = _gated(monkeypatch, "get_memory_record")
    read = asyncio.create_task(
        stm.get_short_term_memory_for_server_channel(SERVER, CHANNEL)
    )
    await entered.wait()
    assert stm.clear_short_term_memory_for_server_channel(SERVER, CHANNEL) == 0
    await stm.flush_pending_writes()  # the delete lands before the read resumes
    release.set()
    assert await read is None
    monkeypatch.undo()
    assert await stm.get_short_term_memory_for_server_channel(SERVER, CHANNEL) is None
    await stm.flush_pending_writes()
    assert [r.scope for r in await durable_rows()] == ["user"]


@db
async def test_clear_then_new_memory_lands_in_order(stm_store) -> None:
    await _summarize("old")
    stm.clear_short_term_memory_for_user(USER)
    await remember(USER, None, CHANNEL, "new")
    await stm.flush_pending_writes()
    rows = {r.cache_key: r for r in await durable_rows()}
    user_row = rows[user_short_term_memory_key(USER, CHANNEL)]
    assert (user_row.summary, user_row.turn_count) == ("", 1)


@db
async def test_hydration_respects_ttls(stm_store) -> None:
    now = timezone.now()
    crude_ttl = timedelta(hours=knobs().SHORT_TERM_MEMORY_TTL_HOURS)
    await sync_to_async(repo.apply_memory_writes)(
        [
            _record("shortterm:user:1:10", now - crude_ttl - timedelta(minutes=1), ""),
            _record("shortterm:user:1:11", now - crude_ttl - timedelta(minutes=1), "s"),
        ]
    )
    assert await stm.get_short_term_memory_for_user_channel(1, 10) is None
    assert (await stm.get_short_term_memory_for_user_channel(1, 11)).summary == "s"


def _record(key: str, updated_at, summary: str) -> repo.DurableMemory:
    channel = int(key.split(":")[3])
    return repo.DurableMemory(
        cache_key=key,
        scope="user",
        channel_disc_id=channel,
        user_disc_id=1,
        server_disc_id=None,
        persona_id=None,
        summary=summary,
        categories=(),
        turn_count=3,
        summarized_turn_count=3 if summary else 0,
        updated_at=updated_at,
    )


@pytest.mark.django_db
def test_janitor_purges_rows_past_retention() -> None:
    now = timezone.now()
    days = knobs().STM_JANITOR_RETENTION_DAYS
    repo.apply_memory_writes(
        [
            _record("shortterm:user:1:1", now - timedelta(days=days, minutes=1), "x"),
            _record("shortterm:user:1:2", now - timedelta(days=days - 1), "y"),
        ]
    )
    result = purge_short_term_memory.apply()
    assert result.get() == 1
    assert list(ShortTermMemoryRecord.objects.values_list("summary", flat=True)) == [
        "y"
    ]


def test_message_helper_is_shared() -> None:
    assert message("x").role == "user"
