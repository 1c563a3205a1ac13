"""Channel LLM and system prompt layers: the per-server gate, threads, invalidation, errors."""

from __future__ import annotations

import pytest

from caches.core import MISSING
from caches.layers import channel_llm, channel_prompt
from caches.layers.channel_llm import get_cached_channel_llm
from caches.layers.channel_prompt import get_cached_channel_prompt
from caches.registry import registry
from tomori.domain.repositories import channels as channels_repo
from tomori.domain.repositories.channels import ChannelPromptRecord

pytestmark = pytest.mark.django_db

TTL = 10 * 60.0
CHANNEL, THREAD, OTHER = 11, 12, 13


@pytest.fixture
def server(make_server):
    return make_server()


# ---------------------------------------------------------------- channel LLM


def test_channel_override_is_cached(run, server, make_llm, django_assert_num_queries):
    llm = make_llm()
    channels_repo.channel_llm_override_set(
        server_id=server.id, channel_disc_id=CHANNEL, llm_id=llm.id
    )
    assert run(get_cached_channel_llm, server.id, CHANNEL) == llm.id
    with django_assert_num_queries(0):
        assert run(get_cached_channel_llm, server.id, CHANNEL) == llm.id


def test_the_gate_answers_every_channel_without_an_override(
    run, server, make_llm, django_assert_num_queries
):
    channels_repo.channel_llm_override_set(
        server_id=server.id, channel_disc_id=CHANNEL, llm_id=make_llm().id
    )
    assert run(get_cached_channel_llm, server.id, OTHER) is None
    assert channel_llm._layer.gate.peek(server.id) == frozenset({CHANNEL})
    with django_assert_num_queries(0):  # any channel of the server: no query
        for channel in (OTHER, OTHER + 1, THREAD):
            assert run(get_cached_channel_llm, server.id, channel) is None
    assert len(channel_llm._layer.values) == 0  # and no entry per channel
    with django_assert_num_queries(1):  # the one channel with an override
        assert run(get_cached_channel_llm, server.id, CHANNEL) is not None


def test_each_read_counts_once_on_the_layer(run, server):
    values = channel_llm._layer.values
    run(get_cached_channel_llm, server.id, OTHER)  # the gate loads: a miss
    run(get_cached_channel_llm, server.id, OTHER + 1)  # the gate answers: a hit
    assert (values.hits, values.misses) == (1, 1)
    assert registry.stats()["channel_llm"]["loads"] == 1  # the gate's


def test_thread_inherits_its_parent_override(run, server, make_llm):
    parent_llm, thread_llm = make_llm(), make_llm()
    channels_repo.channel_llm_override_set(
        server_id=server.id, channel_disc_id=CHANNEL, llm_id=parent_llm.id
    )
    got = run(get_cached_channel_llm, server.id, THREAD, parent_disc_id=CHANNEL)
    assert got == parent_llm.id
    channels_repo.channel_llm_override_set(
        server_id=server.id, channel_disc_id=THREAD, llm_id=thread_llm.id
    )
    registry.apply("channel_llm", "channel", server.id, THREAD)
    got = run(get_cached_channel_llm, server.id, THREAD, parent_disc_id=CHANNEL)
    assert got == thread_llm.id


def test_parent_change_reaches_its_threads(run, server, make_llm):
    llm = make_llm()
    assert (
        run(get_cached_channel_llm, server.id, THREAD, parent_disc_id=CHANNEL) is None
    )
    channels_repo.channel_llm_override_set(
        server_id=server.id, channel_disc_id=CHANNEL, llm_id=llm.id
    )
    registry.apply("channel_llm", "channel", server.id, CHANNEL)
    got = run(get_cached_channel_llm, server.id, THREAD, parent_disc_id=CHANNEL)
    assert got == llm.id


def test_channel_llm_expires(run, server, count_calls, clock):
    loads = count_calls(channels_repo, "channels_with_llm_override")
    run(get_cached_channel_llm, server.id, CHANNEL)
    clock.advance(TTL + 1)
    run(get_cached_channel_llm, server.id, CHANNEL)
    assert loads.calls == 2


def test_channel_llm_ops_drop_the_gate_with_the_entries(
    run, server, make_server, make_llm
):
    other = make_server()
    for where in (server, other):
        for channel in (CHANNEL, OTHER):
            channels_repo.channel_llm_override_set(
                server_id=where.id, channel_disc_id=channel, llm_id=make_llm().id
            )
    for where in (server, other):
        for channel in (CHANNEL, OTHER):
            run(get_cached_channel_llm, where.id, channel)
    assert registry.apply("channel_llm", "server", server.id) == 3  # gate + 2
    assert registry.apply("channel_llm", "channel", other.id, CHANNEL) == 2
    assert channel_llm._layer.gate.peek(other.id) is MISSING
    assert (other.id, OTHER) in channel_llm._layer.values  # another channel's stays


def test_channel_llm_database_error_answers_none(run, server, db_down):
    db_down(channels_repo, "channels_with_llm_override")
    assert run(get_cached_channel_llm, server.id, CHANNEL) is None
    assert len(channel_llm._layer.cache) == 0


def test_channel_llm_value_error_answers_none(run, server, make_llm, db_down):
    channels_repo.channel_llm_override_set(
        server_id=server.id, channel_disc_id=CHANNEL, llm_id=make_llm().id
    )
    db_down(channels_repo, "get_channel_llm_overrides")
    assert run(get_cached_channel_llm, server.id, CHANNEL) is None
    assert (server.id, CHANNEL) not in channel_llm._layer.values


# ------------------------------------------------------------- channel prompt


def test_prompt_override_is_cached(run, server, django_assert_num_queries):
    channels_repo.channel_prompt_override_set(
        server_id=server.id, channel_disc_id=CHANNEL, prompt="Be brief.", mode="replace"
    )
    expected = ChannelPromptRecord(prompt="Be brief.", mode="replace")
    assert run(get_cached_channel_prompt, server.id, CHANNEL) == expected
    with django_assert_num_queries(0):
        assert run(get_cached_channel_prompt, server.id, CHANNEL) == expected


def test_prompt_negative_entry(run, server, django_assert_num_queries):
    assert run(get_cached_channel_prompt, server.id, OTHER) is None
    with django_assert_num_queries(0):
        assert run(get_cached_channel_prompt, server.id, OTHER) is None


def test_prompt_expires(run, server, count_calls, clock):
    loads = count_calls(channels_repo, "channels_with_prompt_override")
    run(get_cached_channel_prompt, server.id, CHANNEL)
    clock.advance(TTL - 1)
    run(get_cached_channel_prompt, server.id, CHANNEL)
    clock.advance(2)
    run(get_cached_channel_prompt, server.id, CHANNEL)
    assert loads.calls == 2


def test_prompt_key_and_server_ops(run, server, make_server):
    other = make_server()
    for where in (server, other):
        for channel in (CHANNEL, OTHER):
            channels_repo.channel_prompt_override_set(
                server_id=where.id, channel_disc_id=channel, prompt="p"
            )
    for where in (server, other):
        for channel in (CHANNEL, OTHER):
            run(get_cached_channel_prompt, where.id, channel)
    assert registry.apply("channel_prompt", "key", (server.id, CHANNEL)) == 1
    assert registry.apply("channel_prompt", "key", server.id) == 1  # the gate
    assert registry.apply("channel_prompt", "server", server.id) == 1  # OTHER's
    assert len(channel_prompt._layer.cache) == 3  # the other server's gate and 2
    assert registry.parse_key("channel_prompt", "7") == 7  # a gate, typed
    assert registry.parse_key("channel_prompt", "7:8") == (7, 8)


def test_prompt_database_error_answers_none_and_caches_nothing(run, server, db_down):
    db_down(channels_repo, "channels_with_prompt_override")
    assert run(get_cached_channel_prompt, server.id, CHANNEL) is None
    assert len(channel_prompt._layer.cache) == 0


def test_prompt_mode_is_validated(server):
    with pytest.raises(ValueError):
        channels_repo.channel_prompt_override_set(
            server_id=server.id, channel_disc_id=CHANNEL, prompt="x", mode="prepend"
        )
