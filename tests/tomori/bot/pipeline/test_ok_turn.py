"""ok_turn and stop_turn: turns built through the twin are ordinary, frozen ResolvedTurns."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tomori.bot.pipeline import Outcome, ResolvedTurn
from tomori.bot.pipeline.history import HistoryContext
from tomori.bot.pipeline.memory import MemoryRead
from tomori.bot.pipeline.resolve import ModelChoice, ServerExtras
from tomori.bot.pipeline.turn import ok_turn, stop_turn

BASE = {
    "message_id": 1,
    "channel_disc_id": 22,
    "user_disc_id": 3,
    "mentions_bot": True,
    "server_disc_id": 11,
    "parent_channel_disc_id": None,
    "server_id": 5,
}


def built() -> ResolvedTurn:
    main = SimpleNamespace(id=7, name="Tomori")
    alter = SimpleNamespace(id=8, name="Alt")
    return ok_turn(
        BASE,
        state=SimpleNamespace(personas=(main, alter), main_persona=main),
        decision=SimpleNamespace(
            persona_ids=(8,), inherited_from_parent=True, cooldown=None
        ),
        persona=alter,
        spotlight=8,
        model=ModelChoice(
            SimpleNamespace(id=2, provider="openrouter", codename="m"), True, True, 99
        ),
        prompt=SimpleNamespace(prompt="be brief", mode="append"),
        sprites=(SimpleNamespace(name="smile"),),
        user=SimpleNamespace(id=4),
        privacy=1,
        extras=ServerExtras(2, 1, 0, "preset", None),
        history=HistoryContext(3, (), 1, 0),
        memory=MemoryRead(2, 5, 6),
    )


def test_ok_turn_equals_the_turn_built_directly() -> None:
    turn = built()
    direct = ResolvedTurn(
        Outcome.OK,
        **BASE,
        user_id=4,
        privacy_level=1,
        persona_names=("Tomori", "Alt"),
        main_persona="Tomori",
        active_persona="Alt",
        active_persona_id=8,
        allowed_persona_ids=(8,),
        whitelist_inherited=True,
        spotlight_persona_id=8,
        llm_id=2,
        llm_provider="openrouter",
        llm_codename="m",
        llm_from_channel_override=True,
        model_supports_tools=True,
        model_context_length=99,
        prompt_override="be brief",
        prompt_mode="append",
        sprite_names=("smile",),
        emoji_count=2,
        sticker_count=1,
        st_preset="preset",
        history_size=3,
        transcripts_found=1,
        stm_entries_found=2,
        stm_user_turns=5,
        stm_server_turns=6,
    )
    assert type(turn) is ResolvedTurn
    assert turn == direct
    assert hash(turn) == hash(direct)


def test_ok_turn_is_frozen() -> None:
    turn = built()
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.outcome = Outcome.DM  # type: ignore[misc]
    replaced = dataclasses.replace(turn, db_failures=("user",))
    assert replaced.db_failures == ("user",) and turn.db_failures == ()


def test_ok_turn_sets_every_field_of_resolved_turn() -> None:
    # ok_turn stores fields one by one into a bare instance (no __init__ runs):
    # a field it forgot would be an unset slot, unreadable.
    turn = built()
    for field in dataclasses.fields(ResolvedTurn):
        try:
            getattr(turn, field.name)
        except AttributeError:
            pytest.fail(f"ok_turn does not set ResolvedTurn.{field.name}")


def test_stop_turn_equals_the_turn_built_directly() -> None:
    turn = stop_turn(Outcome.NOT_WHITELISTED, dict(BASE))
    direct = ResolvedTurn(Outcome.NOT_WHITELISTED, **BASE)
    assert type(turn) is ResolvedTurn and turn == direct
    assert hash(turn) == hash(direct)
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.outcome = Outcome.OK  # type: ignore[misc]
