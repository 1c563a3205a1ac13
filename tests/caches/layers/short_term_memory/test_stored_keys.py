"""Short-term memory's stored-keys filter: a miss for a key never stored asks nothing."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from caches.layers import short_term_memory as stm
from caches.layers.short_term_memory import (
    ShortTermMemoryStore,
    server_short_term_memory_key,
    stored_keys,
    user_short_term_memory_key,
)
from caches.layers.short_term_memory import store as store_module
from caches.layers.short_term_memory.stored_keys import StoredKeys
from tests.caches.layers.short_term_memory.stm_helpers import counting, db, remember
from tomori.domain.models import ShortTermMemoryRecord
from tomori.domain.repositories import memory as repo

USER, SERVER, CHANNEL = 101, 201, 301


async def _restarted_and_built() -> ShortTermMemoryStore:
    """Return a store over the same table (a new process) with its filter built."""
    fresh = ShortTermMemoryStore(maxsize=100)
    assert await fresh.maintain_stored_keys()
    return fresh


@db
async def test_a_miss_for_a_key_never_stored_reads_nothing(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = await _restarted_and_built()
    reads = counting(monkeypatch, "get_memory_record")
    for channel in (1, 2, 3):
        key = user_short_term_memory_key(USER, channel)
        assert await fresh.get(key) is None
    assert reads == []
    assert fresh.stats()["misses_answered_unstored"] == 3


@db
async def test_without_a_built_filter_a_miss_reads_the_table(
    stm_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = ShortTermMemoryStore(maxsize=100)
    reads = counting(monkeypatch, "get_memory_record")
    assert await fresh.get(user_short_term_memory_key(USER, 9)) is None
    assert len(reads) == 1
    assert fresh.stats()["stored_keys_filter"] == "not built"


@db
async def test_keys_stored_before_the_build_are_hydrated(stm_store) -> None:
    await remember(USER, SERVER, CHANNEL, "before the restart")
    await stm.flush_pending_writes()
    fresh = await _restarted_and_built()
    entry = await fresh.get(server_short_term_memory_key(SERVER, CHANNEL))
    assert entry is not None and entry.turn_count == 1


@db
async def test_a_key_stored_after_the_build_is_read_back_once_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = await _restarted_and_built()
    key = user_short_term_memory_key(USER, CHANNEL)
    await store.store(
        user_disc_id=USER, channel_disc_id=CHANNEL, messages=(), server_disc_id=None
    )
    await store.writer.flush()
    store.cache.clear()  # evicted: the row is the only copy now
    reads = counting(monkeypatch, "get_memory_record")
    entry = await store.get(key)
    assert len(reads) == 1
    assert entry is not None and entry.turn_count == 1


@db
async def test_a_batch_stored_while_the_keys_are_read_is_in_the_filter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Queued before the build, stored while its pages are read: not lost."""
    store = ShortTermMemoryStore(maxsize=100)
    key = user_short_term_memory_key(USER, CHANNEL)
    await store.store(
        user_disc_id=USER, channel_disc_id=CHANNEL, messages=(), server_disc_id=None
    )  # queued; no filter yet, so nothing notes it
    entered, release = asyncio.Event(), asyncio.Event()
    real_run_db = store_module.run_db

    async def held_after_the_page(fn, *args, **kwargs):
        result = await real_run_db(fn, *args, **kwargs)
        if fn is repo.memory_keys_page and not entered.is_set():
            entered.set()
            await release.wait()
        return result

    monkeypatch.setattr(store_module, "run_db", held_after_the_page)
    build = asyncio.create_task(store.maintain_stored_keys())
    await asyncio.wait_for(entered.wait(), 10)
    await store.writer.flush()  # stored after the page was read
    assert store.writer.pending_count() == 0
    release.set()
    assert await asyncio.wait_for(build, 10)
    store.cache.clear()
    entry = await store.get(key)
    assert entry is not None and entry.turn_count == 1


@db
async def test_the_build_reads_only_its_shards_rows() -> None:
    now = timezone.now()

    def row(key: str, server: int | None) -> ShortTermMemoryRecord:
        return ShortTermMemoryRecord(
            cache_key=key,
            scope="server" if server else "user",
            user_disc_id=None if server else 7,
            server_disc_id=server,
            channel_disc_id=5,
            updated_at=now,
        )

    shard0, shard1 = 4 << 22, 5 << 22  # (id >> 22) % 2: 0 and 1
    await sync_to_async(ShortTermMemoryRecord.objects.bulk_create)(
        [row("a-shard0", shard0), row("b-shard1", shard1), row("c-dm", None)]
    )
    since = now - timezone.timedelta(hours=1)

    def page(shards: repo.Shards) -> list[str]:
        return repo.memory_keys_page(
            updated_since=since, after="", limit=10, shards=shards
        )

    assert await sync_to_async(page)(None) == ["a-shard0", "b-shard1", "c-dm"]
    assert await sync_to_async(page)(((0,), 2)) == ["a-shard0", "c-dm"]
    assert await sync_to_async(page)(((1,), 2)) == ["b-shard1"]


def test_a_filter_past_its_capacity_asks_for_a_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stored_keys, "MIN_CAPACITY", 100)
    keys = StoredKeys()
    assert keys.needs_build() and not keys.absent("anything")  # not built yet

    async def build() -> None:
        async def none(after: str, limit: int) -> list[str]:
            return []

        async def zero() -> int:
            return 0

        await keys.build(zero, none, list)

    asyncio.run(build())
    assert not keys.needs_build()
    assert keys.absent("never-stored")
    keys.note_all(f"key-{i}" for i in range(150))
    assert not keys.absent("key-7")
    assert keys.needs_build()


@db
def test_a_batch_of_upserts_is_one_statement_without_a_transaction() -> None:
    seen: list[bool] = []

    def record(execute, sql, params, many, context):
        seen.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    now = timezone.now()
    upserts = [
        repo.DurableMemory(f"k{i}", "user", 5, 7, None, None, "", (), 1, 0, now)
        for i in range(3)
    ]
    with connection.execute_wrapper(record):
        repo.apply_memory_writes(upserts)
    assert seen == [False]  # one statement, atomic by itself
    seen.clear()
    with connection.execute_wrapper(record):
        repo.apply_memory_writes([*upserts, repo.DeleteKeys(("k1",))])
    assert seen and all(seen)  # two statements: one transaction
    assert sorted(
        ShortTermMemoryRecord.objects.values_list("cache_key", flat=True)
    ) == ["k0", "k2"]
