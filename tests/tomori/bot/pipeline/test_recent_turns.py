"""Recent turns and the traffic summary: what an operator reads to see a change take effect."""

from __future__ import annotations

from caches.turn_notes import TurnNotes
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline import Outcome, ResolvedTurn
from tomori.bot.pipeline.recent import RecentTurns
from tomori.bot.worker import traffic_line


def turn(outcome: Outcome = Outcome.OK, persona: str = "Tomori") -> ResolvedTurn:
    return ResolvedTurn(
        outcome=outcome,
        message_id=1,
        channel_disc_id=22,
        user_disc_id=3,
        server_disc_id=11,
        active_persona=persona,
    )


def test_recent_turns_are_newest_first_and_bounded():
    recent = RecentTurns(keep=3)
    for n in range(5):
        notes = TurnNotes()
        notes.missed.extend(["user", "user", "tomori_state"] if n == 4 else [])
        recent.record(turn(persona=f"p{n}"), notes, 0.002)
    rows = recent.as_list()
    assert [row["persona"] for row in rows] == ["p4", "p3", "p2"]
    assert rows[0]["missed"] == ["tomori_state", "user"]
    assert rows[0]["latency_ms"] == 2.0 and rows[0]["outcome"] == "ok"


def test_a_window_gives_outcomes_and_percentiles_then_starts_afresh():
    recent = RecentTurns()
    for ms in range(1, 101):
        recent.record(turn(), TurnNotes(), ms / 1000)
    recent.record(turn(Outcome.NOT_WHITELISTED), TurnNotes(), 0.001)
    window = recent.take_window()
    assert window["turns"] == 101
    assert window["outcomes"] == {"ok": 100, "not_whitelisted": 1}
    assert window["p50_ms"] == 50.0 and window["p99_ms"] == 99.0
    assert recent.take_window() == {
        "turns": 0,
        "outcomes": {},
        "p50_ms": None,
        "p99_ms": None,
    }


def test_the_traffic_line_reads_as_one_sentence():
    window = {"turns": 3, "outcomes": {"ok": 2, "dm": 1}, "p50_ms": 0.1, "p99_ms": 0.9}
    assert traffic_line(window, hits=97, misses=3) == (
        "3 turn(s) in the last minute (1 dm, 2 ok); "
        "latency p50 0.10 ms, p99 0.90 ms; cache hit rate 97.0%"
    )
    idle = {"turns": 0, "outcomes": {}, "p50_ms": None, "p99_ms": None}
    assert traffic_line(idle, 0, 0) == (
        "0 turn(s) in the last minute (none); latency n/a; cache hit rate n/a"
    )


async def test_a_turn_records_its_persona_and_the_caches_that_missed(bot: Bot) -> None:
    guild = busiest_guild(bot.sim.world)
    user = await allowed_member(bot.sim.world, guild)
    channel = text_channel(bot.sim.world, guild)
    cold = await bot.ask(guild, user, channel)
    first = bot.pipeline.recent.as_list()[0]
    await bot.ask(guild, user, channel)
    warm = bot.pipeline.recent.as_list()[0]

    assert cold.outcome is Outcome.OK
    assert first["persona"] == cold.active_persona and first["outcome"] == "ok"
    assert "tomori_state" in first["missed"] and "user" in first["missed"]
    assert warm["missed"] == []
    assert warm["latency_ms"] > 0
