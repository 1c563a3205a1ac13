"""Scenario presets, files and the generated world, without any connection."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from tomori.bot.simulator import Scenario, TrafficModel, generate_world
from tomori.bot.simulator.__main__ import main
from tomori.bot.simulator.distributions import apportion
from tomori.bot.simulator.world import TEXT_CHANNEL, VOICE_CHANNEL, shard_of


def test_same_seed_generates_the_same_world():
    first = generate_world(Scenario.small())
    second = generate_world(Scenario.small())
    assert list(first.guilds) == list(second.guilds)
    assert list(first.users) == list(second.users)
    assert first.totals() == second.totals()


def test_other_seed_generates_another_world():
    first = generate_world(Scenario.small())
    other = generate_world(dataclasses.replace(Scenario.small(), seed=8))
    assert set(first.guilds).isdisjoint(other.guilds)


def test_small_scenario_totals_follow_its_parameters():
    scenario = Scenario.small()
    totals = generate_world(scenario).totals()
    assert totals["guilds"] == 5
    assert totals["members"] == sum(scenario.member_counts or ())
    assert totals["users"] == scenario.users_total
    assert totals["channels"] == scenario.channels_total
    assert totals["emojis"] == scenario.emojis_total
    assert totals["stickers"] == scenario.stickers_total
    assert totals["threads"] > 0
    assert totals["voice_states"] > 0
    assert totals["webhooks"] > 0


def test_small_scenario_has_a_guild_discord_py_must_chunk():
    world = generate_world(Scenario.small())
    largest = max(world.guilds.values(), key=lambda g: g.member_count)
    # discord.py (with the presence intent) chunks guilds of 250+ members.
    assert largest.member_count >= 250
    assert len(largest.online_members()) < largest.member_count


def test_production_scenario_matches_the_spec_snapshot():
    totals = generate_world(Scenario.production()).totals()
    assert totals["guilds"] == 516
    assert totals["members"] == 31_800
    assert totals["users"] == 27_100
    assert totals["channels"] == 11_200
    assert totals["emojis"] == 6_500
    assert totals["presences"] == pytest.approx(12_100, rel=0.03)


def test_every_guild_has_the_bot_and_consistent_references():
    world = generate_world(Scenario.small())
    for guild in world.guilds.values():
        assert world.bot_user.id in guild.members
        text_ids = {c.id for c in guild.channels if c.type == TEXT_CHANNEL}
        voice_ids = {c.id for c in guild.channels if c.type == VOICE_CHANNEL}
        assert text_ids and voice_ids
        assert all(t.parent_id in text_ids for t in guild.threads)
        assert set(guild.voice.values()) <= voice_ids
        assert set(guild.voice) <= set(guild.members)
        assert guild.roles[0].id == guild.id  # @everyone


def test_members_include_bot_users_and_mixed_presences():
    world = generate_world(Scenario.small())
    users = [m.user for g in world.guilds.values() for m in g.members.values()]
    assert any(u.bot and u.id != world.bot_user.id for u in users)
    statuses = Counter(u.status for u in users)
    assert statuses["offline"] > 0 and statuses["online"] > 0
    assert any(u.activities for u in users)


def test_guilds_spread_over_two_shards_by_snowflake():
    world = generate_world(Scenario.production())
    shards = [world.guilds_for_shard(i, 2) for i in range(2)]
    assert sum(map(len, shards)) == 516
    assert all(len(s) > 200 for s in shards)
    assert all(shard_of(g.id, 2) == 1 for g in shards[1])


def test_traffic_is_reproducible_and_favours_the_largest_guild():
    scenario = Scenario.small()
    world = generate_world(scenario)
    model_a, model_b = TrafficModel(world, scenario), TrafficModel(world, scenario)
    stream_a = [model_a.next() for _ in range(500)]
    stream_b = [model_b.next() for _ in range(500)]
    assert stream_a == stream_b
    per_guild = Counter(m.guild.id for m in stream_a)
    largest = max(world.guilds.values(), key=lambda g: g.member_count)
    assert per_guild.most_common(1)[0][0] == largest.id
    kinds = Counter(m.kind for m in stream_a)
    assert kinds["member"] > kinds["bot"] > 0 and kinds["webhook"] > 0
    assert any(m.channel_id in {t.id for t in m.guild.threads} for m in stream_a)


def test_scenario_loads_from_a_json_file_extending_a_preset(tmp_path: Path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"extends": "small", "seed": 99, "message_rate": 5}))
    scenario = Scenario.named(str(path))
    assert scenario.name == "tiny"
    assert scenario.seed == 99 and scenario.message_rate == 5
    assert scenario.member_counts == Scenario.small().member_counts


def test_scenario_round_trips_through_a_dict():
    scenario = Scenario.production()
    assert Scenario.from_dict(scenario.to_dict()) == scenario


@pytest.mark.parametrize(
    "data",
    [{"guild_count_typo": 3}, {"online_fraction": 1.5}, {"member_counts": [1, 5]}],
)
def test_invalid_scenarios_are_rejected(data: dict[str, object]):
    with pytest.raises(ValueError):
        Scenario.from_dict(data)


def test_unknown_scenario_name_is_rejected():
    with pytest.raises(ValueError, match="no scenario"):
        Scenario.named("enormous")


def test_apportion_hits_the_total_within_bounds():
    shares = apportion(100, [5, 1, 1, 1], minimum=2, cap=40)
    assert sum(shares) == 100
    assert max(shares) == 40 and min(shares) >= 2


def test_cli_prints_scenario_totals(capsys: pytest.CaptureFixture[str]):
    main(["--scenario", "small", "--totals"])
    assert json.loads(capsys.readouterr().out)["guilds"] == 5
