"""build_client: the discord.py client class, intents and cache settings."""

from __future__ import annotations

from typing import Any

import discord
import pytest

from tomori.bot.client import (
    TomoriClient,
    TomoriShardedClient,
    bot_intents,
    build_client,
)
from tomori.bot.pipeline import MessagePipeline


def test_build_client_without_shards_is_a_plain_client() -> None:
    client = build_client(pipeline=MessagePipeline())

    assert type(client) is TomoriClient
    assert client.intents == bot_intents()
    assert client._connection.max_messages == 1000
    assert client._connection._chunk_guilds is False


def test_build_client_with_shards_is_an_auto_sharded_client() -> None:
    client = build_client(pipeline=MessagePipeline(), shard_ids=[1], shard_count=2)

    assert isinstance(client, TomoriShardedClient)
    assert isinstance(client, discord.AutoShardedClient)
    assert (client.shard_ids, client.shard_count) == ([1], 2)


def test_shard_ids_without_a_count_are_refused() -> None:
    with pytest.raises(ValueError, match="shard_count"):
        build_client(pipeline=MessagePipeline(), shard_ids=[0])


def test_intents_include_what_turns_and_invalidations_read() -> None:
    intents = bot_intents()

    assert intents.members and intents.presences and intents.message_content
    assert intents.emojis_and_stickers and intents.webhooks and intents.voice_states
    assert not intents.typing and not intents.reactions


async def test_injected_before_identify_hook_replaces_the_wait() -> None:
    calls: list[tuple[Any, bool]] = []

    async def hook(shard_id: int | None, *, initial: bool = False) -> None:
        calls.append((shard_id, initial))

    client = build_client(pipeline=MessagePipeline(), before_identify_hook=hook)
    await client.before_identify_hook(3, initial=False)

    assert calls == [(3, False)]


def test_the_pipeline_reads_the_bots_user_from_its_client() -> None:
    pipeline = MessagePipeline()
    client = build_client(pipeline=pipeline, max_messages=50)

    assert pipeline.self_id is None  # not logged in yet
    assert client.pipeline is pipeline
    assert client._connection.max_messages == 50
