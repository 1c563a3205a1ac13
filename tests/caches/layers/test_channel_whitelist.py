"""Channel whitelist layer: decisions, thread inheritance, role signatures, invalidation."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from django.db import OperationalError

from caches.core import MISSING
from caches.layers import channel_whitelist
from caches.layers.channel_whitelist import (
    get_cached_whitelist_status,
    role_signature,
    whitelist_cache_key,
)
from caches.registry import registry
from tomori.domain.models import CooldownType
from tomori.domain.repositories import channels as channels_repo

pytestmark = pytest.mark.django_db

#: A decision that depends on the member's roles (kept per role set).
RESTRICTED = dataclasses.replace(
    channels_repo.UNKNOWN_SERVER_DECISION,
    server_known=True,
    whitelist_enabled=True,
    restricts_by_role=True,
)

#: A server's rows: the whitelist on, no channel, and a role whitelist (or none).
ROLE_WHITELIST = channels_repo.ServerWhitelist(
    known=True, enabled=True, channels={}, allowed_roles=frozenset({99})
)
OPEN_WHITELIST = dataclasses.replace(ROLE_WHITELIST, allowed_roles=frozenset())

TTL = 5 * 60.0
CHANNEL, OTHER, THREAD = 111, 222, 333


@pytest.fixture
def guarded(make_server, make_persona):
    """A server that restricts channels, with CHANNEL whitelisted for one persona."""
    server = make_server(channel_whitelist_enabled=True)
    persona = make_persona(server, is_main=True)
    channels_repo.whitelist_channel_add(
        server_id=server.id,
        channel_disc_id=CHANNEL,
        persona_ids=[persona.id],
        cooldown_type=CooldownType.USER,
        cooldown_seconds=30,
    )
    return server, persona


def status(run, server, channel, **kw):
    return run(get_cached_whitelist_status, server.server_disc_id, channel, **kw)


def test_whitelisted_channel_decision(run, guarded):
    server, persona = guarded
    decision = status(run, server, CHANNEL, role_ids=[])
    assert decision.channel_allowed and decision.allowed
    assert decision.persona_ids == (persona.id,)
    assert decision.cooldown.cooldown_type == "user" and decision.cooldown.seconds == 30
    assert not status(run, server, OTHER, role_ids=[]).channel_allowed


def test_server_without_whitelist_allows_every_channel(run, make_server):
    server = make_server()
    decision = status(run, server, OTHER, role_ids=[])
    assert decision.allowed and not decision.whitelist_enabled


def test_thread_inherits_its_parent(run, guarded):
    server, _ = guarded
    decision = status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[])
    assert decision.channel_allowed and decision.inherited_from_parent
    assert decision.cooldown is not None


def test_thread_and_channel_checks_do_not_collide(run, guarded):
    server, _ = guarded
    assert not status(run, server, THREAD, role_ids=[]).channel_allowed
    assert status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[]).allowed
    assert len(channel_whitelist._layer.decisions) == 2


def test_role_restriction_and_unknown_roles(run, guarded):
    server, _ = guarded
    channels_repo.whitelist_role_add(server_id=server.id, role_disc_id=7)
    assert status(run, server, CHANNEL, role_ids=[7, 8]).allowed is True
    assert status(run, server, CHANNEL, role_ids=[8]).allowed is False
    assert status(run, server, CHANNEL, role_ids=[]).role_allowed is False
    assert status(run, server, CHANNEL).role_allowed is None  # roles unknown


def test_no_roles_and_unknown_roles_are_different_keys():
    assert role_signature(None) != role_signature([])
    assert whitelist_cache_key(1, 2, None, None) != whitelist_cache_key(1, 2, None, [])


def test_key_is_a_compact_tuple_independent_of_role_order():
    key = whitelist_cache_key(1, 2, 3, [9, 4, 9])
    assert key == (1, 2, 3, frozenset({4, 9}))
    assert key == whitelist_cache_key(1, 2, 3, (4, 9))
    assert whitelist_cache_key(1, 2) == (1, 2, 0, None)  # no parent, roles unknown


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("1:22:3:9,4", (1, 22, 3, frozenset({4, 9}))),
        ("1:22::?", (1, 22, 0, None)),
        ("1:22:0:-", (1, 22, 0, frozenset())),
        (" 1:22::- ", (1, 22, 0, frozenset())),
        ("1:22:3:*", (1, 22, 3, channel_whitelist.ANY_ROLES)),
    ],
)
def test_operator_keys_parse_to_cache_keys(text, key):
    assert registry.parse_key("channel_whitelist", text) == key


@pytest.mark.parametrize("text", ["1:22:3", "1:x::?", "1:22::4,,5", "-1:22::?"])
def test_malformed_operator_keys_are_rejected(text):
    with pytest.raises(ValueError):
        registry.parse_key("channel_whitelist", text)


def test_operator_key_invalidates_the_entry_it_names(run, guarded):
    server, _ = guarded
    channels_repo.whitelist_role_add(server_id=server.id, role_disc_id=7)
    status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[5, 3])
    status(run, server, THREAD, parent_disc_id=CHANNEL)
    key = registry.parse_key(
        "channel_whitelist", f"{server.server_disc_id}:{THREAD}:{CHANNEL}:3,5"
    )
    assert registry.invalidate("channel_whitelist", key) == 1
    assert len(channel_whitelist._layer.decisions) == 1


def test_role_order_does_not_create_a_second_entry(
    run, guarded, django_assert_num_queries
):
    server, _ = guarded
    status(run, server, CHANNEL, role_ids=[3, 1, 2])
    with django_assert_num_queries(0):
        status(run, server, CHANNEL, role_ids=[2, 3, 1, 1])
        status(run, server, CHANNEL, role_ids=(1, 2, 3))
    assert len(channel_whitelist._layer.decisions) == 1


def test_entry_expires_after_ttl(run, guarded, count_calls, clock):
    server, _ = guarded
    loads = count_calls(channels_repo, "load_server_whitelist")
    status(run, server, CHANNEL, role_ids=[])
    clock.advance(TTL - 1)
    status(run, server, CHANNEL, role_ids=[])
    clock.advance(2)
    status(run, server, CHANNEL, role_ids=[])
    assert loads.calls == 2


def test_channel_op_drops_the_channel_and_its_threads_only(run, guarded):
    server, _ = guarded
    channels_repo.whitelist_role_add(server_id=server.id, role_disc_id=5)
    status(run, server, CHANNEL, role_ids=[])
    status(run, server, CHANNEL, role_ids=[5])
    status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[])
    status(run, server, OTHER, role_ids=[])
    status(run, server, CHANNEL * 10 + 1, role_ids=[])  # shares CHANNEL's prefix
    removed = registry.apply(
        "channel_whitelist", "channel", server.server_disc_id, CHANNEL
    )
    assert removed == 3 + 1  # and the server's rows
    assert len(channel_whitelist._layer.decisions) == 2
    assert server.server_disc_id not in channel_whitelist._layer.servers


def test_invalidating_a_parent_refreshes_its_threads(run, guarded):
    server, _ = guarded
    assert status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[]).allowed
    channels_repo.whitelist_channel_remove(server_id=server.id, channel_disc_id=CHANNEL)
    registry.apply("channel_whitelist", "channel", server.server_disc_id, CHANNEL)
    decision = status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[])
    assert not decision.channel_allowed


def test_server_op_drops_only_that_server(run, guarded, make_server):
    server, _ = guarded
    other = make_server()
    status(run, server, CHANNEL, role_ids=[])
    status(run, server, OTHER, role_ids=[])
    status(run, other, CHANNEL, role_ids=[])
    assert registry.apply("channel_whitelist", "server", server.server_disc_id) == 3
    assert len(channel_whitelist._layer.decisions) == 1
    assert list(channel_whitelist._layer.servers.keys()) == [other.server_disc_id]


def test_a_server_drop_on_the_loop_goes_in_steps_and_serves_nothing_stale(
    run, guarded, make_server
):
    server, _ = guarded
    disc = server.server_disc_id
    assert status(run, server, CHANNEL, role_ids=[]).channel_allowed
    status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[])
    for channel in range(1000, 1100):  # other channels' cached answers
        status(run, server, channel, role_ids=[])
    other = make_server()
    status(run, other, CHANNEL, role_ids=[])
    # The row goes without a commit, so nothing invalidates: the cache is stale.
    channels_repo.whitelist_channel_remove(server_id=server.id, channel_disc_id=CHANNEL)
    key = (disc, CHANNEL, channel_whitelist.NO_PARENT, channel_whitelist.ANY_ROLES)

    async def drop_then_read() -> int:
        # 102 answers (the thread's counted once, though under two channels)
        # and the server's rows.
        assert channel_whitelist.invalidate_whitelist_cache(disc) == 103
        assert disc in channel_whitelist._layer.drops.pending
        assert channel_whitelist._layer.decisions.peek(
            key
        ).channel_allowed  # still resident
        decision = await get_cached_whitelist_status(disc, CHANNEL, role_ids=[])
        assert not decision.channel_allowed  # the table's, never the stale entry
        for _ in range(1000):  # bounded: a drop that never ends fails, not hangs
            if not channel_whitelist._layer.drops.pending:
                break
            await asyncio.sleep(0)
        assert not channel_whitelist._layer.drops.pending
        return len(channel_whitelist._layer.decisions)

    assert run(drop_then_read) == 1  # the other server's answer only
    assert channel_whitelist._layer.drops.steps >= 102 // 32
    # Once the drop is done, answers are cached again.
    assert not status(run, server, CHANNEL, role_ids=[]).channel_allowed
    assert channel_whitelist._layer.decisions.peek(key) is not MISSING


def test_unknown_server_allows(run):
    decision = run(get_cached_whitelist_status, 999, CHANNEL, role_ids=[])
    assert decision.allowed and not decision.server_known


def test_database_error_propagates_and_caches_nothing(run, guarded, db_down):
    server, _ = guarded
    db_down(channels_repo, "load_server_whitelist")
    with pytest.raises(OperationalError):
        status(run, server, CHANNEL, role_ids=[])
    assert len(channel_whitelist._layer.cache) == 0


async def test_stored_keys_share_one_role_set_per_distinct_roles(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from caches.layers import channel_whitelist as layer

    async def rows(*_args, **_kw):  # type: ignore[no-untyped-def]
        return ROLE_WHITELIST

    monkeypatch.setattr(layer, "run_db", rows)
    await layer.get_cached_whitelist_status(1, 10, role_ids=[3, 2, 1])
    await layer.get_cached_whitelist_status(1, 11, role_ids=(1, 2, 3))
    keys = layer._layer.decisions.keys_in_scope("server", 1)
    assert len(keys) == 2 and keys[0][3] is keys[1][3] == frozenset({1, 2, 3})


def test_a_server_without_role_whitelist_keeps_one_answer_per_channel(
    run, guarded, count_calls
):
    server, _ = guarded
    loads = count_calls(channels_repo, "load_server_whitelist")
    for roles in ([1], [2, 3], [], None):
        assert status(run, server, CHANNEL, role_ids=roles).allowed
    assert status(run, server, THREAD, parent_disc_id=CHANNEL, role_ids=[4]).allowed
    # One load of the server's rows and one "*" entry per channel, whatever
    # the members' roles.
    assert loads.calls == 1
    assert sorted(channel_whitelist._layer.decisions.keys()) == [
        (server.server_disc_id, CHANNEL, 0, channel_whitelist.ANY_ROLES),
        (server.server_disc_id, THREAD, CHANNEL, channel_whitelist.ANY_ROLES),
    ]
    stats = channel_whitelist._layer.cache.stats()
    assert (stats["hits"], stats["misses"]) == (3, 2)  # one count per question
    assert stats["loads"] == 2  # the first decision's and the rows'
    # The thread's "*" entry belongs to its parent channel's scope too.
    assert (
        registry.apply("channel_whitelist", "channel", server.server_disc_id, CHANNEL)
        == 2 + 1  # and the server's rows
    )


def test_a_server_with_a_role_whitelist_keeps_answers_per_role_set(run, guarded):
    server, _ = guarded
    channels_repo.whitelist_role_add(server_id=server.id, role_disc_id=7)
    assert status(run, server, CHANNEL, role_ids=[7]).allowed is True
    assert status(run, server, CHANNEL, role_ids=[8]).allowed is False
    assert status(run, server, CHANNEL, role_ids=[7]).allowed is True  # a hit
    stored = channel_whitelist._layer.decisions.keys()
    assert {key[3] for key in stored} == {frozenset({7}), frozenset({8})}


async def test_an_answer_dropped_during_its_load_is_not_kept_under_any_roles(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    from caches.layers import channel_whitelist as layer

    async def rows(*_args, **_kw):  # type: ignore[no-untyped-def]
        layer.invalidate_server_whitelist(1)  # a save lands mid-load
        return OPEN_WHITELIST

    monkeypatch.setattr(layer, "run_db", rows)
    decision = await layer.get_cached_whitelist_status(1, 10, role_ids=[3])
    assert not decision.restricts_by_role
    assert len(layer._layer.cache) == 0


async def test_a_stale_load_does_not_move_a_newer_answer_to_any_roles(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from caches.layers import channel_whitelist as layer

    open_answer = dataclasses.replace(RESTRICTED, restricts_by_role=False)
    gates: list[asyncio.Event] = []

    def loader(*_args):  # type: ignore[no-untyped-def]
        first = not gates
        gate = asyncio.Event()
        gates.append(gate)

        async def load():  # type: ignore[no-untyped-def]
            await gate.wait()
            # The first load read the rows before a role whitelist was added.
            return open_answer if first else RESTRICTED

        return load

    monkeypatch.setattr(layer, "_decider", loader)
    stale = asyncio.create_task(layer.get_cached_whitelist_status(1, 10, role_ids=[1]))
    await asyncio.sleep(0)
    layer.invalidate_server_whitelist(1)  # a WhitelistedRole is added mid-load
    fresh = asyncio.create_task(layer.get_cached_whitelist_status(1, 10, role_ids=[1]))
    await asyncio.sleep(0)
    gates[1].set()
    assert (await fresh).restricts_by_role
    gates[0].set()
    assert not (await stale).restricts_by_role  # its caller gets what it read
    # The newer, role-restricted answer stays under its role set only.
    assert layer._layer.decisions.keys() == [(1, 10, 0, frozenset({1}))]
