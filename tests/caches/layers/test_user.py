"""User layer: rows, negative entries, privacy, the blacklist sub-cache, failing closed."""

from __future__ import annotations

import pytest

from caches.core import MISSING
from caches.layers import user as user_layer
from caches.layers.user import (
    get_cached_blacklist_status,
    get_cached_privacy_level,
    get_cached_user_row,
    invalidate_user_cache,
)
from caches.registry import registry
from tomori.domain.models import PrivacyLevel, User
from tomori.domain.repositories import users as users_repo

pytestmark = pytest.mark.django_db

TTL = 30 * 60.0


def test_miss_loads_the_row_and_hit_runs_no_query(
    run, make_user, django_assert_num_queries
):
    row = make_user(username="ana", privacy_level=PrivacyLevel.PRIVATE)
    assert run(get_cached_user_row, row.user_disc_id) == row
    with django_assert_num_queries(0):
        assert run(get_cached_user_row, row.user_disc_id) == row
        assert run(get_cached_privacy_level, row.user_disc_id) == PrivacyLevel.PRIVATE


def test_unknown_user_is_a_negative_entry(run, django_assert_num_queries):
    assert run(get_cached_user_row, 77) is None
    assert user_layer._layer.cache.get(77) is None  # cached, not MISSING
    with django_assert_num_queries(0):
        assert run(get_cached_user_row, 77) is None
        assert run(get_cached_privacy_level, 77) == PrivacyLevel.STANDARD


def test_row_expires_after_ttl(run, make_user, count_calls, clock):
    row = make_user()
    calls = count_calls(users_repo, "get_user_by_disc_id")
    run(get_cached_user_row, row.user_disc_id)
    clock.advance(TTL - 1)
    run(get_cached_user_row, row.user_disc_id)
    clock.advance(2)
    run(get_cached_user_row, row.user_disc_id)
    assert calls.calls == 2


def test_blacklist_answers_are_cached_per_server(
    run, make_user, make_server, django_assert_num_queries
):
    row = make_user()
    banned_in, free_in = make_server(), make_server()
    users_repo.user_blacklist_add(server_id=banned_in.id, user_id=row.id)
    assert run(get_cached_blacklist_status, banned_in.server_disc_id, row.user_disc_id)
    assert not run(
        get_cached_blacklist_status, free_in.server_disc_id, row.user_disc_id
    )
    with django_assert_num_queries(0):
        assert run(
            get_cached_blacklist_status, banned_in.server_disc_id, row.user_disc_id
        )


def test_refreshing_the_row_keeps_blacklist_answers(
    run, make_user, make_server, count_calls
):
    row, server = make_user(), make_server()
    run(get_cached_user_row, row.user_disc_id)
    run(get_cached_blacklist_status, server.server_disc_id, row.user_disc_id)
    calls = count_calls(users_repo, "blacklisted_users")
    assert registry.apply("user", "key", row.user_disc_id) == 1
    run(get_cached_user_row, row.user_disc_id)
    run(get_cached_blacklist_status, server.server_disc_id, row.user_disc_id)
    assert calls.calls == 0


def test_a_server_keeps_one_blacklist_whatever_its_members(
    run, make_user, make_server, count_calls, django_assert_num_queries
):
    users = [make_user() for _ in range(4)]
    banned_in, quiet = make_server(), make_server()
    users_repo.user_blacklist_add(server_id=banned_in.id, user_id=users[0].id)
    calls = count_calls(users_repo, "blacklisted_users")
    answers = {
        (server.server_disc_id, u.user_disc_id): run(
            get_cached_blacklist_status, server.server_disc_id, u.user_disc_id
        )
        for server in (banned_in, quiet)
        for u in users
    }
    assert [key for key, listed in answers.items() if listed] == [
        (banned_in.server_disc_id, users[0].user_disc_id)
    ]
    # One load and one entry per server: its set of blacklisted users.
    assert calls.calls == 2
    cache = user_layer._layer.cache
    assert cache.peek(user_layer.blacklist_cache_key(banned_in.server_disc_id)) == {
        users[0].user_disc_id
    }
    empty = cache.peek(user_layer.blacklist_cache_key(quiet.server_disc_id))
    assert empty == frozenset() and empty is users_repo.NOBODY_BLACKLISTED
    assert len(cache) == 2
    with django_assert_num_queries(0):
        assert not run(get_cached_blacklist_status, quiet.server_disc_id, 999)


def test_blacklist_op_drops_the_servers_set_only(run, make_user, make_server):
    row, a, b = make_user(), make_server(), make_server()
    run(get_cached_user_row, row.user_disc_id)
    run(get_cached_blacklist_status, a.server_disc_id, row.user_disc_id)
    run(get_cached_blacklist_status, b.server_disc_id, row.user_disc_id)
    users_repo.user_blacklist_add(server_id=a.id, user_id=row.id)
    assert registry.apply("user", "blacklist", a.server_disc_id, row.user_disc_id) == 1
    assert len(registry.get("user")) == 2  # the row and server b's blacklist stay
    assert run(get_cached_blacklist_status, a.server_disc_id, row.user_disc_id)


def test_operator_keys_name_a_row_or_a_servers_blacklist(run, make_user, make_server):
    from caches.invalidation.describe import describe_event

    row, server = make_user(), make_server()
    server_id, user_id = server.server_disc_id, row.user_disc_id
    run(get_cached_blacklist_status, server_id, user_id)
    key = user_layer.blacklist_cache_key(server_id)
    assert key == (server_id, "*") and user_layer._layer.cache.get(key) == frozenset()
    # "server:*" names the blacklist; "server:user" the same one (its answer).
    assert registry.parse_key("user", f"{server_id}:*") == key
    assert registry.parse_key("user", f"{server_id}:{user_id}") == key
    assert registry.parse_key("user", str(user_id)) == user_id
    with pytest.raises(ValueError):
        registry.parse_key("user", f"{server_id}:x")
    blacklist = user_layer.LAYER.op("blacklist")(server_id, user_id)
    assert describe_event(blacklist) == (
        f"blacklist entry of user {user_id} in server {server_id}"
    )
    assert registry.apply(*blacklist[:2], *blacklist[2]) == 1


def test_blacklist_server_op_drops_that_server_for_every_user(
    run, make_user, make_server
):
    users = [make_user() for _ in range(3)]
    a, b = make_server(), make_server()
    for u in users:
        run(get_cached_blacklist_status, a.server_disc_id, u.user_disc_id)
        run(get_cached_blacklist_status, b.server_disc_id, u.user_disc_id)
    assert registry.apply("user", "blacklist_server", a.server_disc_id) == 1
    cache = user_layer._layer.cache
    key = user_layer.blacklist_cache_key
    assert cache.get(key(a.server_disc_id)) is MISSING
    assert cache.get(key(b.server_disc_id)) == frozenset()


async def test_a_blacklist_changed_during_its_load_is_not_kept(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    async def stale_read(*_args, **_kw):  # type: ignore[no-untyped-def]
        # A user is blacklisted (and the server's set dropped) mid-read.
        user_layer.invalidate_user_blacklist_cache(1, 5)
        return frozenset()

    monkeypatch.setattr(user_layer, "run_db", stale_read)
    assert not await get_cached_blacklist_status(1, 5)
    assert len(user_layer._layer.cache) == 0


def test_invalidate_user_cache_keeps_the_servers_blacklists(
    run, make_user, make_server
):
    row, server = make_user(), make_server()
    run(get_cached_user_row, row.user_disc_id)
    run(get_cached_blacklist_status, server.server_disc_id, row.user_disc_id)
    assert invalidate_user_cache(row.user_disc_id) == 1
    assert len(user_layer._layer.cache) == 1


def test_database_error_fails_closed_and_caches_nothing(run, make_user, db_down):
    row = make_user(privacy_level=PrivacyLevel.OPEN)
    db_down(users_repo, "get_user_by_disc_id")
    db_down(users_repo, "blacklisted_users")
    assert run(get_cached_privacy_level, row.user_disc_id) == PrivacyLevel.RESTRICTED
    assert run(get_cached_blacklist_status, 1, row.user_disc_id) is True
    assert len(registry.get("user")) == 0


def test_row_read_raises_on_database_error(run, db_down):
    from django.db import OperationalError

    db_down(users_repo, "get_user_by_disc_id")
    with pytest.raises(OperationalError):
        run(get_cached_user_row, 5)
    assert len(registry.get("user")) == 0


def test_cached_rows_share_one_language_string(run, make_user):
    # Each row read from the database carries its own "en"; cached rows keep one.
    first, second = make_user(language="en"), make_user(language="en")
    one = run(get_cached_user_row, first.user_disc_id)
    two = run(get_cached_user_row, second.user_disc_id)
    assert one.language == "en" and one.language is two.language


def test_a_warm_loads_users_in_bulk_as_their_misses_would(
    run, make_user, django_assert_num_queries, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(user_layer, "WARM_CHUNK", 2)
    rows = [make_user(username=f"u{i}") for i in range(3)]
    unknown = 991
    ids = [row.user_disc_id for row in rows] + [unknown]
    with django_assert_num_queries(2):  # 4 ids, 2 a query
        stored = run(user_layer.warm_users, ids, limit=10)
    assert stored == 4
    with django_assert_num_queries(0):
        assert [run(get_cached_user_row, i) for i in ids] == [*rows, None]
    # What each miss would have stored, entry for entry.
    warmed = {i: user_layer._layer.cache.peek(i) for i in ids}
    registry.clear_all()
    assert {i: run(get_cached_user_row, i) for i in ids} == warmed


def test_a_warm_stops_at_its_limit_and_skips_cached_users(run, make_user, count_calls):
    rows = [make_user(username=f"u{i}") for i in range(3)]
    run(get_cached_user_row, rows[0].user_disc_id)
    loaded = count_calls(users_repo, "get_users_by_disc_ids")
    stored = run(user_layer.warm_users, [row.user_disc_id for row in rows], limit=2)
    assert (stored, loaded.calls) == (1, 1)  # rows[0] cached; rows[2] past the limit
    assert user_layer._layer.cache.peek(rows[2].user_disc_id) is MISSING


def test_a_refresh_reloads_the_rows_held_and_no_others(run, make_user) -> None:
    held, other = make_user(username="held"), make_user(username="other")
    run(get_cached_user_row, held.user_disc_id)
    run(get_cached_user_row, 88)  # an unknown user's negative entry is a row too
    run(get_blacklisted, held)  # a server's blacklist: not a row, not refreshed
    # Outside any invalidation (no commit in this test): the entry is stale.
    User.objects.filter(pk=held.id).update(username="renamed")
    assert user_layer._layer.cache.peek(held.user_disc_id).username == "held"
    assert run(user_layer.refresh_users) == 2
    assert user_layer._layer.cache.peek(held.user_disc_id).username == "renamed"
    assert user_layer._layer.cache.peek(other.user_disc_id) is MISSING
    assert registry.stats()["user"]["refreshes"] == 2
    assert user_layer.user_ttl() == TTL


async def get_blacklisted(row) -> bool:  # type: ignore[no-untyped-def]
    return await get_cached_blacklist_status(1, row.user_disc_id)
