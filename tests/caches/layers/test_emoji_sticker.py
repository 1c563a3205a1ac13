"""Emoji/sticker layer: lazy sync check, per-category loading, invalidation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from caches.layers import emoji_sticker
from caches.layers.emoji_sticker import (
    GuildExpressions,
    expressions_of,
    load_emoji_sticker_cache,
    needs_sync,
)
from caches.registry import registry
from tomori.domain.models import ServerExpressionSync
from tomori.domain.repositories import expressions as expressions_repo
from tomori.domain.repositories.expressions import ExpressionSyncState, GuildExpression

pytestmark = pytest.mark.django_db

TTL = 10 * 60.0


def guild_of(emojis: int, stickers: int = 0, *, start: int = 1) -> GuildExpressions:
    return GuildExpressions(
        emojis=[GuildExpression(start + i, f"e{start + i}") for i in range(emojis)],
        stickers=[GuildExpression(9000 + i, f"s{i}") for i in range(stickers)],
    )


def names(rows) -> list[str]:
    return sorted(r.name for r in rows)


def test_first_load_syncs_and_caches(run, make_server, django_assert_num_queries):
    server = make_server()
    entry = run(load_emoji_sticker_cache, server.id, guild=guild_of(3, 2))
    emojis, stickers = expressions_of(entry)
    assert names(emojis) == ["e1", "e2", "e3"] and len(stickers) == 2
    with django_assert_num_queries(0):
        assert run(load_emoji_sticker_cache, server.id, guild=guild_of(3, 2)) is entry


def test_a_guild_function_runs_on_a_miss_only(run, make_server):
    server = make_server()
    built: list[int] = []

    def guild() -> GuildExpressions:
        built.append(1)
        return guild_of(3, 2)

    entry = run(load_emoji_sticker_cache, server.id, guild=guild)
    assert built == [1] and names(expressions_of(entry)[0]) == ["e1", "e2", "e3"]
    assert run(load_emoji_sticker_cache, server.id, guild=guild) is entry
    assert built == [1]  # the hit built nothing


def test_small_count_difference_does_not_resync(run, make_server, count_calls):
    server = make_server()
    run(load_emoji_sticker_cache, server.id, guild=guild_of(3))
    registry.apply("emoji_sticker", "key", server.id)
    syncs = count_calls(expressions_repo, "sync_server_expressions")
    entry = run(load_emoji_sticker_cache, server.id, guild=guild_of(5))
    assert syncs.calls == 0 and len(entry.emojis) == 3


def test_large_count_difference_resyncs(run, make_server):
    server = make_server()
    run(load_emoji_sticker_cache, server.id, guild=guild_of(3))
    registry.apply("emoji_sticker", "key", server.id)
    entry = run(load_emoji_sticker_cache, server.id, guild=guild_of(6))
    assert len(entry.emojis) == 6


def test_day_old_sync_resyncs(run, make_server):
    server = make_server()
    run(load_emoji_sticker_cache, server.id, guild=guild_of(3))
    ServerExpressionSync.objects.filter(server_id=server.id).update(
        last_synced_at=timezone.now() - timedelta(hours=25)
    )
    registry.apply("emoji_sticker", "key", server.id)
    renamed = guild_of(3, start=50)
    entry = run(load_emoji_sticker_cache, server.id, guild=renamed)
    assert names(entry.emojis) == ["e50", "e51", "e52"]


def test_forced_sync_reloads_even_on_a_hit(run, make_server):
    server = make_server()
    run(load_emoji_sticker_cache, server.id, guild=guild_of(3))
    entry = run(load_emoji_sticker_cache, server.id, guild=guild_of(4), force_sync=True)
    assert len(entry.emojis) == 4


def test_failed_sync_never_raises(run, make_server, db_down):
    server = make_server()
    db_down(expressions_repo, "sync_server_expressions")
    entry = run(load_emoji_sticker_cache, server.id, guild=guild_of(3))
    assert entry.emojis == ()


def test_disabled_category_is_not_loaded_and_loads_once_enabled(
    run, make_server, django_assert_num_queries
):
    server = make_server(emoji_usage_enabled=False)
    run(load_emoji_sticker_cache, server.id, guild=guild_of(2, 1))
    entry = run(load_emoji_sticker_cache, server.id)
    assert entry.emojis is None and len(entry.stickers) == 1
    enabled = run(load_emoji_sticker_cache, server.id, emoji_enabled=True)
    assert names(enabled.emojis) == ["e1", "e2"]
    with django_assert_num_queries(0):
        run(load_emoji_sticker_cache, server.id, emoji_enabled=True)


def test_caller_reporting_a_category_disabled_gets_none(run, make_server):
    server = make_server()
    run(load_emoji_sticker_cache, server.id, guild=guild_of(2, 1))
    entry = run(load_emoji_sticker_cache, server.id, sticker_enabled=False)
    assert entry.stickers is None and len(entry.emojis) == 2


def test_entry_expires_after_ttl(run, make_server, count_calls, clock):
    server = make_server()
    loads = count_calls(expressions_repo, "load_stored_expressions")
    run(load_emoji_sticker_cache, server.id)
    clock.advance(TTL + 1)
    run(load_emoji_sticker_cache, server.id)
    assert loads.calls == 2


def test_key_and_all_ops(run, make_server):
    a, b = make_server(), make_server()
    run(load_emoji_sticker_cache, a.id)
    run(load_emoji_sticker_cache, b.id)
    assert registry.apply("emoji_sticker", "key", a.id) == 1
    assert registry.apply("emoji_sticker", "all") == 1


def test_database_error_on_load_propagates_and_caches_nothing(
    run, make_server, db_down
):
    server = make_server()
    db_down(expressions_repo, "load_stored_expressions")
    with pytest.raises(OperationalError):
        run(load_emoji_sticker_cache, server.id)
    assert len(emoji_sticker._layer.cache) == 0


def test_needs_sync_rules():
    now = timezone.now()
    recent = ExpressionSyncState(3, 1, now - timedelta(hours=1))
    guild = guild_of(3, 1)
    assert needs_sync(None, guild, now=now)
    assert needs_sync(ExpressionSyncState(3, 1, None), guild, now=now)
    assert not needs_sync(recent, guild, now=now)
    assert needs_sync(recent, guild, now=now, force=True)
    assert not needs_sync(recent, guild_of(5, 1), now=now)
    assert needs_sync(recent, guild_of(6, 1), now=now)
    assert needs_sync(recent, guild_of(3, 4), now=now)
    assert needs_sync(recent, guild, now=now + timedelta(hours=24))


def test_cached_rows_share_one_kind_string(run, make_server):
    server = make_server()
    entry = run(load_emoji_sticker_cache, server.id, guild=guild_of(3, 2))
    emojis, stickers = expressions_of(entry)
    assert len({id(row.kind) for row in emojis}) == 1
    assert len({id(row.kind) for row in stickers}) == 1
