"""Short-term memory: keys, scopes, ttl, summaries, listings and clears."""

from __future__ import annotations

from django.test import override_settings
from django.utils import timezone

from caches.core import MISSING, FakeClock
from caches.layers import short_term_memory as stm
from caches.layers.short_term_memory import (
    ShortTermMemoryStore,
    StmMessage,
    server_short_term_memory_key,
    user_short_term_memory_key,
)
from caches.layers.short_term_memory.keys import parse_short_term_memory_key
from tests.caches.layers.short_term_memory.stm_helpers import (
    db,
    durable_rows,
    message,
    remember,
)
from tomori.domain.knobs import knobs

USER, OTHER_USER, SERVER, CHANNEL = 101, 102, 201, 301


def test_keys_follow_the_spec() -> None:
    assert user_short_term_memory_key(1, 2) == "shortterm:user:1:2"
    assert user_short_term_memory_key(1, 2, 3) == "shortterm:user:1:2:3"
    assert server_short_term_memory_key(4, 2) == "shortterm:server:4:2"
    assert server_short_term_memory_key(4, 2, 3) == "shortterm:server:4:2:3"
    parsed = parse_short_term_memory_key("shortterm:server:4:2:3")
    assert (parsed.scope, parsed.owner, parsed.channel_disc_id) == ("server", 4, 2)
    assert parsed.persona_id == 3


@db
async def test_store_in_a_guild_writes_user_and_server_keys(stm_store) -> None:
    entry = await remember(USER, SERVER, CHANNEL, "hi")
    assert entry.key == user_short_term_memory_key(USER, CHANNEL)
    user_entry = await stm.get_short_term_memory_for_user_channel(USER, CHANNEL)
    shared = await stm.get_short_term_memory_for_server_channel(SERVER, CHANNEL)
    assert [m.content for m in user_entry.messages] == ["hi"]
    assert [m.content for m in shared.messages] == ["hi"]
    assert shared.user_disc_id is None and shared.server_disc_id == SERVER


@db
async def test_store_in_a_dm_writes_only_the_user_key(stm_store) -> None:
    await remember(USER, None, CHANNEL, "psst")
    assert await stm.get_short_term_memory_for_user_channel(USER, CHANNEL)
    assert len(stm_store) == 1


@db
@override_settings(SHORT_TERM_MEMORY_MAX_MESSAGES_PER_CHANNEL=3)
async def test_store_keeps_the_last_messages_only(stm_store) -> None:
    entry = await remember(USER, SERVER, CHANNEL, *[f"m{i}" for i in range(5)])
    assert [m.content for m in entry.messages] == ["m2", "m3", "m4"]


@db
async def test_store_keeps_summary_and_counts_turns(stm_store) -> None:
    await remember(USER, SERVER, CHANNEL, "one")
    await stm.update_short_term_memory_summary(
        channel_disc_id=CHANNEL,
        user_disc_id=USER,
        server_disc_id=SERVER,
        summary="they talked about cats",
        categories=["pets"],
    )
    entry = await remember(USER, SERVER, CHANNEL, "two")
    assert entry.summary == "they talked about cats"
    assert entry.categories == ("pets",)
    assert (entry.turn_count, entry.summarized_turn_count) == (2, 1)


@db
@override_settings(SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH=5)
async def test_summary_is_truncated(stm_store) -> None:
    [entry] = await stm.update_short_term_memory_summary(
        channel_disc_id=CHANNEL, user_disc_id=USER, summary="abcdefgh"
    )
    assert entry.summary == "abcde"


@db
async def test_persona_scoped_entries_are_separate(stm_store) -> None:
    await remember(USER, SERVER, CHANNEL, "to alter", persona_id=7)
    await remember(USER, SERVER, CHANNEL, "to main")
    alter = await stm.get_short_term_memory_for_server_channel(
        SERVER, CHANNEL, persona_id=7
    )
    main = await stm.get_short_term_memory_for_server_channel(SERVER, CHANNEL)
    assert alter.messages[0].content == "to alter"
    assert main.messages[0].content == "to main"


@db
async def test_crude_entry_expires_and_summarized_entry_lives_longer(
    stm_store, clock: FakeClock
) -> None:
    await remember(USER, None, CHANNEL, "crude")
    await remember(USER, None, CHANNEL + 1, "kept")
    await stm.update_short_term_memory_summary(
        channel_disc_id=CHANNEL + 1, user_disc_id=USER, summary="s"
    )
    clock.advance(knobs().SHORT_TERM_MEMORY_TTL_HOURS * 3600)
    await stm.flush_pending_writes()
    assert stm_store.cache.peek(user_short_term_memory_key(USER, CHANNEL)) is MISSING
    assert await stm.get_short_term_memory_for_user_channel(USER, CHANNEL) is None
    kept = await stm.get_short_term_memory_for_user_channel(USER, CHANNEL + 1)
    assert kept.summary == "s"


@db
async def test_clear_expired_entries_keeps_live_ones(
    stm_store, clock: FakeClock
) -> None:
    await remember(USER, None, CHANNEL, "old")
    clock.advance(knobs().SHORT_TERM_MEMORY_TTL_HOURS * 3600 - 1)
    await remember(USER, None, CHANNEL + 1, "new")
    clock.advance(1)
    assert stm.clear_expired_entries() == 1
    assert list(stm_store.cache.keys()) == [
        user_short_term_memory_key(USER, CHANNEL + 1)
    ]


@db
async def test_user_listing_is_newest_first_and_filtered(stm_store) -> None:
    await remember(USER, SERVER, 1, "a", persona_id=7, persona_lineage=(7, 1))
    await remember(USER, SERVER + 1, 2, "b", persona_id=8)
    await remember(USER, None, 3, "c", persona_id=1)
    await remember(OTHER_USER, SERVER, 4, "d", persona_id=7)
    listed = await stm.get_short_term_memories_for_user(USER)
    assert [e.channel_disc_id for e in listed] == [3, 2, 1]
    lineage = await stm.get_short_term_memories_for_user(
        USER, persona_lineage={1}, exclude_channel_disc_id=3
    )
    assert [e.channel_disc_id for e in lineage] == [1]
    assert len(await stm.get_short_term_memories_for_user(USER, limit=2)) == 2


@db
async def test_server_listing_covers_every_channel_and_persona(stm_store) -> None:
    await remember(USER, SERVER, 1, "a", persona_id=7)
    await remember(OTHER_USER, SERVER, 1, "b", persona_id=8)
    await remember(USER, SERVER, 2, "c")
    await remember(USER, SERVER + 1, 3, "elsewhere")
    listed = await stm.get_short_term_memories_for_server(SERVER)
    assert [(e.channel_disc_id, e.persona_id) for e in listed] == [
        (2, None),
        (1, 8),
        (1, 7),
    ]


@db
@override_settings(SHORT_TERM_MEMORY_MAX_OTHER_CHANNELS=2)
async def test_latest_shared_entry_is_visible_from_other_channels(stm_store) -> None:
    for channel in (1, 2, 3):
        await remember(USER, SERVER, channel, f"in {channel}", persona_id=7)
    await remember(USER, SERVER, 2, "again in 2", persona_id=7, persona_lineage=(7,))
    await remember(USER, SERVER, 5, "other persona", persona_id=9)
    others = await stm.get_short_term_memories_from_other_channels(
        SERVER, 1, persona_lineage={7}
    )
    assert [e.channel_disc_id for e in others] == [2, 3]
    assert others[0].messages[-1].content == "again in 2"


@db
async def test_clear_for_user_keeps_shared_entries(stm_store) -> None:
    await remember(USER, SERVER, 1, "a")
    await remember(USER, SERVER, 2, "b", persona_id=7)
    await remember(OTHER_USER, SERVER, 1, "c")
    assert stm.clear_short_term_memory_for_user(USER) == 2
    assert await stm.get_short_term_memories_for_user(USER) == []
    assert await stm.get_short_term_memory_for_user_channel(OTHER_USER, 1)
    assert len(await stm.get_short_term_memories_for_server(SERVER)) == 2


@db
async def test_clear_for_channel_clears_every_scope(stm_store) -> None:
    await remember(USER, SERVER, 1, "a", persona_id=7)
    await remember(OTHER_USER, SERVER, 1, "b")
    await remember(USER, SERVER, 2, "kept")
    await stm.update_short_term_memory_summary(
        channel_disc_id=1, server_disc_id=SERVER, summary="gone"
    )
    assert stm.clear_short_term_memory_for_channel(1) == 4
    await stm.flush_pending_writes()
    assert {row.channel_disc_id for row in await durable_rows()} == {2}
    assert [
        e.channel_disc_id for e in await stm.get_short_term_memories_for_server(SERVER)
    ] == [2]


@db
async def test_clear_for_server_channel_keeps_user_entries(stm_store) -> None:
    await remember(USER, SERVER, 1, "a", persona_id=7)
    await remember(USER, SERVER, 1, "b", persona_id=8)
    assert stm.clear_short_term_memory_for_server_channel(SERVER, 1, persona_id=7) == 1
    assert (
        await stm.get_short_term_memory_for_server_channel(SERVER, 1, persona_id=7)
        is None
    )
    assert await stm.get_short_term_memory_for_server_channel(SERVER, 1, persona_id=8)
    assert await stm.get_short_term_memory_for_user_channel(USER, 1, persona_id=7)
    assert (
        stm.clear_short_term_memory_for_server_channel(SERVER, 1, all_personas=True)
        == 1
    )
    assert len(await stm.get_short_term_memories_for_user(USER)) == 2


def test_cap_evicts_the_oldest_entry() -> None:
    store = ShortTermMemoryStore(maxsize=3)
    for channel in range(4):
        entry = stm.ShortTermMemoryEntry(
            key=user_short_term_memory_key(USER, channel),
            scope="user",
            channel_disc_id=channel,
            last_updated=timezone.now(),
            user_disc_id=USER,
            messages=(StmMessage("user", "x", timezone.now()),),
        )
        store._put(entry)
    assert len(store) == 3
    assert user_short_term_memory_key(USER, 0) not in store.cache


def test_message_helper_builds_aware_timestamps() -> None:
    assert timezone.is_aware(message("x").timestamp)
