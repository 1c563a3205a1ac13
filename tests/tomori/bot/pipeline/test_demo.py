"""seed_world: bulk demo rows for the simulated guilds, idempotent."""

from __future__ import annotations

import pytest

from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world
from tomori.domain import models as m

pytestmark = pytest.mark.django_db


def test_seed_world_creates_a_server_per_guild_most_of_them_configured() -> None:
    world = generate_world(Scenario.small())

    counts = seed_world(world, configured_fraction=0.5, seed=3)

    assert counts["servers"] == m.Server.objects.count() == len(world.guilds)
    configured = m.ServerModelConfig.objects.filter(api_key__isnull=False).count()
    assert configured == counts["configured_servers"] >= 1
    assert m.Persona.objects.filter(is_main=True).count() == len(world.guilds)
    humans = sum(1 for u in world.users.values() if not u.bot)
    assert m.User.objects.count() == counts["users"] == humans
    assert m.Llm.objects.filter(is_default=True).count() == 3  # one per provider


def test_seed_world_covers_every_demo_feature() -> None:
    counts = seed_world(generate_world(Scenario.small()))

    for feature in (
        "whitelisted_channels",
        "channel_prompts",
        "channel_llms",
        "sprites",
        "spotlights",
        "blacklisted",
        "mcp_configs",
        "st_presets",
        "novelai",
        "expressions",
    ):
        assert counts[feature] > 0, feature
    assert m.Server.objects.filter(channel_whitelist_enabled=True).exists()
    assert m.ServerExpressionSync.objects.count() == counts["servers"]


def test_seed_world_a_second_time_creates_nothing() -> None:
    world = generate_world(Scenario.small())
    seed_world(world)
    before = {model: model.objects.count() for model in (m.Server, m.User, m.Persona)}

    again = seed_world(world)

    assert again == {"llms": 0, "preset_personas": 0, "users": 0, "servers": 0}
    assert {model: model.objects.count() for model in before} == before
