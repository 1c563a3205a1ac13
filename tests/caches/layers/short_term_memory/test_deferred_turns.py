"""Quiet turns on user keys the worker does not hold: deferred, read together, applied in order."""

from __future__ import annotations

import asyncio

import pytest
from django.db import OperationalError
from django.utils import timezone

from caches.core import MISSING
from caches.layers import short_term_memory as stm
from caches.layers.short_term_memory import (
    ShortTermMemoryStore,
    server_short_term_memory_key,
    user_short_term_memory_key,
)
from tests.caches.layers.short_term_memory.stm_helpers import (
    counting,
    db,
    durable_rows,
    message,
    remember,
)

SERVER, CHANNEL = 201, 301
ANN, BOB = 101, 102


async def _turn(
    store: ShortTermMemoryStore, user: int, text: str, *, reads_user: bool = False
) -> stm.TurnMemory:
    """Store one guild turn saying `text` (a quiet one unless `reads_user`)."""
    return await store.turn(
        user_disc_id=user,
        channel_disc_id=CHANNEL,
        server_disc_id=SERVER,
        messages_for=lambda conversation: (message(text),),
        reads_user=reads_user,
    )


async def _stored_not_held(store: ShortTermMemoryStore, *users: int) -> None:
    """Give each user a stored turn (Ann's summarized), then evict their user keys."""
    for user in users:
        await remember(user, SERVER, CHANNEL, "earlier")
    await stm.update_short_term_memory_summary(
        channel_disc_id=CHANNEL, summary="ann likes tea", user_disc_id=ANN
    )
    await store.flush()
    for user in users:
        store.invalidate(user_short_term_memory_key(user, CHANNEL))


def _user(store: ShortTermMemoryStore, user: int) -> stm.ShortTermMemoryEntry:
    entry = store.cache.peek(user_short_term_memory_key(user, CHANNEL))
    assert isinstance(entry, stm.ShortTermMemoryEntry)
    return entry


@db
async def test_quiet_turns_defer_unheld_user_keys_and_one_query_reads_them_all(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _stored_not_held(stm_store, ANN, BOB)
    one, many = (
        counting(monkeypatch, "get_memory_record"),
        counting(monkeypatch, "get_memory_records"),
    )

    memories = [
        await _turn(stm_store, user, f"{name} {n}")
        for n in (1, 2)
        for user, name in ((ANN, "ann"), (BOB, "bob"))
    ]

    assert one == [] and many == []  # nothing read: the channel's key is held
    assert [m.user for m in memories] == [None] * 4
    assert [m.server.turn_count for m in memories] == [2, 3, 4, 5]
    assert stm_store.deferred.turns == 4 and len(stm_store.deferred) == 2
    assert stm_store.turns_behind() >= 4
    assert stm_store.cache.peek(user_short_term_memory_key(ANN, CHANNEL)) is MISSING

    await asyncio.wait_for(stm_store.flush(), 10)

    assert len(many) == 1 and one == []  # both keys in one query
    ann, bob = _user(stm_store, ANN), _user(stm_store, BOB)
    assert (ann.turn_count, ann.summary) == (3, "ann likes tea")
    assert (bob.turn_count, bob.summary) == (3, None)
    assert [m.content for m in ann.messages] == ["ann 2"]  # the last turn's
    assert [m.content for m in _server(stm_store).messages] == ["bob 2"]
    rows = {r.cache_key: r.turn_count for r in await durable_rows()}
    assert rows[ann.key] == rows[bob.key] == 3
    assert stm_store.turns_behind() == 0
    assert stm_store.stats()["deferred_turns_applied"] >= 4


def _server(store: ShortTermMemoryStore) -> stm.ShortTermMemoryEntry:
    entry = store.cache.peek(server_short_term_memory_key(SERVER, CHANNEL))
    assert isinstance(entry, stm.ShortTermMemoryEntry)
    return entry


@db
async def test_a_held_user_key_is_stored_at_once(stm_store) -> None:
    await remember(ANN, SERVER, CHANNEL, "earlier")

    memory = await _turn(stm_store, ANN, "now")

    assert memory.user is not None and memory.user.turn_count == 1
    assert len(stm_store.deferred) == 0
    assert _user(stm_store, ANN).turn_count == 2


@db
async def test_every_read_of_a_deferred_key_sees_its_turns_first(stm_store) -> None:
    await _stored_not_held(stm_store, ANN)
    await _turn(stm_store, ANN, "quiet 1")
    await _turn(stm_store, ANN, "quiet 2")

    got = await stm_store.get(user_short_term_memory_key(ANN, CHANNEL))
    assert got is not None and got.turn_count == 3

    await _turn(stm_store, ANN, "quiet 3")  # held now: stored at once
    assert len(stm_store.deferred) == 0
    stm_store.invalidate(user_short_term_memory_key(ANN, CHANNEL))
    await _turn(stm_store, ANN, "quiet 4")
    answering = await _turn(stm_store, ANN, "asks", reads_user=True)
    assert answering.user is not None and answering.user.turn_count == 5
    assert [m.content for m in answering.user.messages] == ["quiet 4"]
    assert _user(stm_store, ANN).turn_count == 6

    await _turn(stm_store, ANN, "quiet 5")  # held: at once
    stm_store.invalidate(user_short_term_memory_key(ANN, CHANNEL))
    await _turn(stm_store, ANN, "quiet 6")
    listed = await stm.get_short_term_memories_for_user(ANN)
    assert [(e.turn_count, e.messages[-1].content) for e in listed] == [(8, "quiet 6")]
    await stm_store.flush()
    rows = {r.cache_key: r.turn_count for r in await durable_rows()}
    assert rows[user_short_term_memory_key(ANN, CHANNEL)] == 8


@db
async def test_a_delete_drops_deferred_turns_and_a_cache_clear_keeps_them(
    stm_store,
) -> None:
    await _stored_not_held(stm_store, ANN, BOB)
    await _turn(stm_store, ANN, "deleted with the rest")
    await _turn(stm_store, BOB, "kept through a cache clear")

    stm.clear_short_term_memory_for_user(ANN)
    stm_store.clear()  # the emergency clear's: cached entries only
    await asyncio.wait_for(stm_store.flush(), 10)

    rows = {r.cache_key: r.turn_count for r in await durable_rows()}
    assert user_short_term_memory_key(ANN, CHANNEL) not in rows
    assert rows[user_short_term_memory_key(BOB, CHANNEL)] == 2
    assert len(stm_store.deferred) == 0


@db
async def test_a_failed_read_keeps_the_deferred_turns_until_the_database_answers(
    stm_store,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    settings,
) -> None:
    settings.SHORT_TERM_MEMORY_RETRY_MAX_SECONDS = 0.01
    await _stored_not_held(stm_store, ANN)
    deferred = stm_store.deferred
    real, attempts = deferred._load, []

    async def fails_twice(keys):
        attempts.append(list(keys))
        if len(attempts) <= 2:
            raise OperationalError("connection refused")
        return await real(keys)

    monkeypatch.setattr(deferred, "_load", fails_twice)
    failures = deferred.failures
    await _turn(stm_store, ANN, "during the outage")
    with pytest.raises(OperationalError):  # a reader gets the error: nothing lost
        await stm_store.get(user_short_term_memory_key(ANN, CHANNEL))
    assert deferred.turns == 1

    await asyncio.wait_for(stm_store.flush(), 10)

    assert deferred.failures - failures == 2 and deferred.turns == 0
    assert "reading 1 deferred user keys failed (OperationalError" in caplog.text
    assert "after 2 failed attempts" in caplog.text
    assert _user(stm_store, ANN).turn_count == 2


async def test_deferred_turns_are_bounded_oldest_key_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from caches.layers.short_term_memory.deferred import (
        DeferredTurn,
        DeferredTurns,
        Identity,
    )

    applied: list[tuple[str, int]] = []

    async def load(keys):
        return dict.fromkeys(keys)

    deferred = DeferredTurns(
        load,
        lambda key, record, d, reader: applied.append((key, len(d.turns))),
        max_turns=3,
    )
    turn = DeferredTurn((), None, (), None, None, None)  # type: ignore[arg-type]
    for key in ("a", "b", "a", "c"):
        deferred.defer(key, Identity(1, 2, 3, None), turn)

    assert deferred.dropped == 2 and deferred.turns == 2  # "a" went, both its turns
    assert "dropped the oldest key's (2 turns dropped so far)" in caplog.text
    await deferred.flush()
    assert applied == [("b", 1), ("c", 1)]


@db
async def test_at_the_cap_a_deferred_key_is_written_around_the_cache() -> None:
    store = ShortTermMemoryStore(maxsize=5)  # a process's own store, small
    for user, channel in ((ANN, CHANNEL), (BOB, CHANNEL), (BOB, CHANNEL + 1)):
        await store.store(
            user_disc_id=user,
            channel_disc_id=channel,
            server_disc_id=SERVER,
            messages=[message("earlier")],
        )
    await store.flush()
    ann = user_short_term_memory_key(ANN, CHANNEL)
    assert len(store) == 5 and store.cache.peek(ann) is not MISSING
    store.invalidate(ann)
    await store.store(  # the cap again, without Ann's user key
        user_disc_id=BOB, channel_disc_id=CHANNEL + 2, messages=[message("dm")]
    )
    held = set(store.cache.keys())
    assert len(held) == 5 and ann not in held

    memory = await _turn(store, ANN, "quiet")
    await asyncio.wait_for(store.flush(), 10)

    assert memory.user is None and store.written_around == 1
    assert set(store.cache.keys()) == held  # nothing evicted for it
    rows = {r.cache_key: r.turn_count for r in await durable_rows()}
    assert rows[ann] == 2
    got = await store.get(ann)  # read back when a turn needs it
    assert got is not None and got.turn_count == 2


@db
async def test_a_listing_sees_a_key_written_around_before_its_row_is_stored() -> None:
    store = ShortTermMemoryStore(maxsize=10)
    release, real_call = asyncio.Event(), store.writer._call

    async def held(apply, writes):  # in flight until released: no row yet
        await release.wait()
        await real_call(apply, writes)

    store.writer._call = held
    ann = user_short_term_memory_key(ANN, CHANNEL)
    entry = stm.ShortTermMemoryEntry(
        key=ann,
        scope="user",
        channel_disc_id=CHANNEL,
        last_updated=timezone.now(),
        user_disc_id=ANN,
        server_disc_id=SERVER,
        summary="ann likes tea",
        turn_count=4,
    )
    store.writer.submit_entries([entry], turns=1)  # what a write-around queues
    assert store.cache.peek(ann) is MISSING and await durable_rows() == []

    listed = await store.list_scope("user", ANN)

    assert [(e.key, e.turn_count, e.summary) for e in listed] == [
        (ann, 4, "ann likes tea")
    ]
    release.set()
    await asyncio.wait_for(store.flush(), 10)
    assert [(r.cache_key, r.turn_count) for r in await durable_rows()] == [(ann, 4)]


@db
async def test_a_quiet_turn_deferred_during_a_read_of_its_key_comes_first(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from caches.layers.short_term_memory import hydration
    from tomori.domain.repositories import memory as repo

    await _stored_not_held(stm_store, ANN)
    read, release = asyncio.Event(), asyncio.Event()
    real_run_db = hydration.run_db

    async def gated(fn, *args, **kwargs):  # hold the answering turn's read
        result = await real_run_db(fn, *args, **kwargs)
        if fn is repo.get_memory_record:
            read.set()
            await release.wait()
        return result

    monkeypatch.setattr(hydration, "run_db", gated)
    answering = asyncio.create_task(_turn(stm_store, ANN, "asks", reads_user=True))
    await asyncio.wait_for(read.wait(), 10)  # the row is read, not yet cached
    quiet = await _turn(stm_store, ANN, "quiet, after the question")
    assert quiet.user is None and ANN_KEY in stm_store.deferred
    release.set()
    memory = await asyncio.wait_for(answering, 10)

    # The quiet turn stored its channel key first, so it is the earlier turn
    # of the user's key too: the answering turn sees it, and comes after it.
    assert memory.user is not None and memory.user.turn_count == 2
    assert [m.content for m in memory.user.messages] == ["quiet, after the question"]
    ann = _user(stm_store, ANN)
    assert ann.turn_count == 3 and [m.content for m in ann.messages] == ["asks"]
    assert ann.last_updated >= memory.user.last_updated
    await stm_store.flush()
    rows = {r.cache_key: r.turn_count for r in await durable_rows()}
    assert rows[ANN_KEY] == 3


ANN_KEY = user_short_term_memory_key(ANN, CHANNEL)


async def test_overlaying_many_keys_at_once_matches_overlaying_each() -> None:
    from caches.layers.short_term_memory.durable import DurableWriter
    from tomori.domain.repositories.memory import DeleteKeys, DeleteWhere, DurableMemory

    def row(user: int, channel: int, turns: int) -> DurableMemory:
        return DurableMemory(
            cache_key=user_short_term_memory_key(user, channel),
            scope="user",
            channel_disc_id=channel,
            user_disc_id=user,
            server_disc_id=SERVER,
            persona_id=None,
            summary="",
            categories=(),
            turn_count=turns,
            summarized_turn_count=0,
            updated_at=timezone.now(),
        )

    async def never(apply, writes):  # the queue stays as submitted
        raise AssertionError("not drained in this test")

    writer = DurableWriter(lambda writes: None, call=never)
    table = {r.cache_key: r for r in (row(1, 10, 1), row(2, 10, 1), row(3, 11, 1))}
    for write in (
        row(1, 10, 2),
        DeleteKeys((row(2, 10, 0).cache_key,)),
        row(2, 10, 5),  # stored again after its delete
        DeleteWhere(channel_disc_id=11),
        row(4, 12, 1),
    ):
        writer.submit(write)
    keys = [
        row(user, channel, 0).cache_key
        for user, channel in ((1, 10), (2, 10), (3, 11), (4, 12), (5, 10))
    ]
    read = {key: table.get(key) for key in keys}

    many = writer.overlay_many(read)

    assert many == {key: writer.overlay(key, read[key]) for key in keys}
    assert [None if r is None else r.turn_count for r in many.values()] == [
        2,
        5,
        None,
        1,
        None,
    ]
    writer._pending.clear()  # nothing to store: leave no retries behind


@db
async def test_at_the_cap_a_never_stored_user_key_is_written_around_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = ShortTermMemoryStore(maxsize=3)
    await store.store(
        user_disc_id=BOB,
        channel_disc_id=CHANNEL,
        server_disc_id=SERVER,
        messages=[message("b")],
    )
    await store.store(user_disc_id=BOB, channel_disc_id=CHANNEL + 1, messages=[])
    await store.flush()
    assert await store.maintain_stored_keys()  # the filter knows what is stored
    held = set(store.cache.keys())
    one = counting(monkeypatch, "get_memory_record")
    many = counting(monkeypatch, "get_memory_records")
    carol = 103

    memory = await _turn(store, carol, "first words here")

    assert memory.user is None and len(store.deferred) == 0
    assert one == many == [] and store.written_around == 1
    assert set(store.cache.keys()) == held  # nothing evicted for it
    await asyncio.wait_for(store.flush(), 10)
    rows = {r.cache_key: r.turn_count for r in await durable_rows()}
    assert rows[user_short_term_memory_key(carol, CHANNEL)] == 1
    assert not store.stored.absent(user_short_term_memory_key(carol, CHANNEL))
