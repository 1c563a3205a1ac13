"""The real discord.py client on the simulated Discord, through the real pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from caches.layers import (
    layer_names,
    markdown_table,
    novelai_subscription,
    persona_sprite_message,
    voice_transcript,
)
from caches.layers.short_term_memory import short_term_memory_store
from caches.registry import registry
from tests.tomori.bot.pipeline.conftest import Bot
from tomori.bot.pipeline import PIPELINE_LAYERS, QUIET_TURN_LAYERS, Outcome
from tomori.domain import models as m

pytestmark = pytest.mark.e2e

#: Pipeline layers a turn reads only when the history or the model calls for
#: them (checked apart); every OK guild turn reads the others.
CONDITIONAL = set(
    layer_names(
        (
            novelai_subscription.LAYER,
            persona_sprite_message.LAYER,
            voice_transcript.LAYER,
            markdown_table.LAYER,
        )
    )
)
ALWAYS_READ = tuple(name for name in PIPELINE_LAYERS if name not in CONDITIONAL)


def hits() -> dict[str, int]:
    return {name: stats["hits"] for name, stats in registry.stats().items()}


def lookups() -> dict[str, int]:
    return {
        name: stats["hits"] + stats["misses"]
        for name, stats in registry.stats().items()
    }


@sync_to_async
def spotlight_rows() -> list[tuple[int, int, int, str]]:
    return [
        (
            s.server.server_disc_id,
            s.user.user_disc_id,
            s.channel_disc_id,
            s.persona.name,
        )
        for s in m.PersonalSpotlight.objects.select_related("server", "user", "persona")
    ]


async def test_bot_becomes_ready_and_turns_match_messages_of_non_bot_authors(
    bot: Bot,
) -> None:
    kinds = await bot.send_traffic(300)

    assert bot.client.counters["ready"] == 1
    assert len(bot.client.guilds) == 5
    assert bot.responder.total == kinds["member"]
    assert bot.pipeline.counters.skipped_bots == kinds["bot"] + kinds["webhook"]
    assert bot.pipeline.counters.errors == 0
    assert bot.responder.by_outcome[Outcome.OK] > kinds["member"] // 2


async def _speak_spotlighted(bot: Bot) -> tuple[Any, ...]:
    for server, user, channel, persona in await spotlight_rows():
        turn = await bot.ask(server, user, channel)
        if turn is not None and turn.outcome is Outcome.OK:
            return (server, user, channel, persona, turn)
    raise AssertionError("no spotlighted user could speak")


async def test_every_layer_the_pipeline_reads_shows_hits_after_warm_up(
    bot: Bot,
) -> None:
    await bot.send_traffic(300)
    warm = [t for t in bot.responder.last if t.outcome is Outcome.OK][-30:]
    server, user, channel, persona, first = await _speak_spotlighted(bot)
    for t in warm:  # the traffic's turns were mostly quiet: answer each once
        await bot.ask(t.server_disc_id, t.user_disc_id, t.channel_disc_id)
    before = hits()

    repeated = [
        await bot.ask(t.server_disc_id, t.user_disc_id, t.channel_disc_id) for t in warm
    ]
    again = await bot.ask(server, user, channel)

    after = hits()
    expected = set(ALWAYS_READ)
    if any(t is not None and t.llm_provider == "novelai" for t in repeated):
        expected.add(novelai_subscription.NAME)
    assert {name for name in expected if after[name] <= before[name]} == set()
    assert first.active_persona == again.active_persona == persona
    assert again.spotlight_persona_id is not None


async def test_a_quiet_turn_reads_only_the_gate_and_the_next_answer_captures_it(
    bot: Bot,
) -> None:
    await bot.send_traffic(100)
    # A user with a row (the spotlight needs one), answered once: captured.
    *place, _persona, _first = await _speak_spotlighted(bot)
    memory = short_term_memory_store()
    captured = {key: await memory.get(key) for key in memory.channel_keys(place[2])}
    before = lookups()

    quiet = await bot.speak(*place, "said in passing")
    between = lookups()
    answered = await bot.ask(*place, "second question")
    after = lookups()

    assert quiet is not None and answered is not None
    assert quiet.outcome is answered.outcome is Outcome.OK
    assert (quiet.mentions_bot, answered.mentions_bot) == (False, True)
    read_quiet = {name for name in PIPELINE_LAYERS if between[name] != before[name]}
    assert read_quiet == set(QUIET_TURN_LAYERS)  # the gate: state, user, whitelist
    answer_only = set(ALWAYS_READ) - set(QUIET_TURN_LAYERS)
    assert "short_term_memory" in answer_only
    assert {name for name in answer_only if after[name] == between[name]} == set()
    # The quiet turn chose nothing and captured nothing; the answer did both.
    assert quiet.active_persona is None and answered.active_persona is not None
    assert quiet.llm_codename is None and answered.llm_codename is not None
    assert quiet.history_size == 0 < answered.history_size
    assert quiet.stm_entries_found == 0 and answered.stm_entries_found == 2
    # Both entries (the user's and the channel's) now end with what was said
    # since the first capture, the quiet message included, in order.
    assert len(captured) == 2
    for key, entry in captured.items():
        assert entry is not None
        now = await memory.get(key)
        assert now is not None and now.turn_count == entry.turn_count + 1
        said = [m.content for m in now.messages]
        assert said[-3].endswith("hello")  # the first capture's own message
        assert said[-2].endswith("said in passing")
        assert said[-1].endswith("second question")
