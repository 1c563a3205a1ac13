"""Turn a Scenario into a World, reproducibly from the scenario's seed."""

from __future__ import annotations

import random

from tomori.bot.simulator import names
from tomori.bot.simulator.distributions import apportion, zipf_weights
from tomori.bot.simulator.guild_builder import GuildBuilder, GuildPlan
from tomori.bot.simulator.scenario import Scenario
from tomori.bot.simulator.snowflake import ERA_END_MS, RandomSnowflakes
from tomori.bot.simulator.world import SimUser, World


def generate_world(scenario: Scenario) -> World:
    """Return the World a scenario describes; the same seed gives the same world."""
    rng = random.Random(scenario.seed)
    ids = RandomSnowflakes(rng)
    bot = SimUser(
        id=scenario.bot_user_id,
        username=scenario.bot_name.lower(),
        global_name=scenario.bot_name,
        bot=True,
        status="online",
    )
    sizes = member_counts(scenario)
    guild_ids = [ids.make() for _ in sizes]
    memberships = _assign_users(scenario, sizes, rng, ids)
    users = {bot.id: bot}
    for members in memberships:
        users.update((user.id, user) for user in members)
    plan = GuildPlan.of(scenario, sizes)
    guilds = {}
    for index, (guild_id, members) in enumerate(
        zip(guild_ids, memberships, strict=True)
    ):
        build = GuildBuilder(scenario, plan.for_guild(index), rng, ids)
        guild = build.guild(guild_id, [bot, *members])
        guilds[guild.id] = guild
    application_id = scenario.bot_user_id
    return World(
        bot_user=bot, application_id=application_id, guilds=guilds, users=users
    )


def member_counts(scenario: Scenario) -> list[int]:
    """Return each guild's member count (bot included), largest first."""
    if scenario.member_counts is not None:
        return sorted(scenario.member_counts, reverse=True)
    weights = zipf_weights(scenario.guild_count, scenario.size_zipf_s)
    return apportion(scenario.members_total, weights, minimum=scenario.min_members)


def _assign_users(
    scenario: Scenario, sizes: list[int], rng: random.Random, ids: RandomSnowflakes
) -> list[list[SimUser]]:
    """Fill each guild's human slots: every user once, then some in several guilds."""
    slots = [index for index, size in enumerate(sizes) for _ in range(size - 1)]
    rng.shuffle(slots)
    distinct = min(len(slots), (scenario.users_total or len(slots) + 1) - 1)
    pool = [_make_user(scenario, rng, ids) for _ in range(distinct)]
    memberships: list[list[SimUser]] = [[] for _ in sizes]
    taken: list[set[int]] = [set() for _ in sizes]
    for position, guild_index in enumerate(slots):
        user = pool[position] if position < distinct else None
        user = user or _pick_unjoined(pool, taken[guild_index], rng)
        if user is None:  # The guild already holds every pooled user.
            user = _make_user(scenario, rng, ids)
        memberships[guild_index].append(user)
        taken[guild_index].add(user.id)
    return memberships


def _pick_unjoined(
    pool: list[SimUser], taken: set[int], rng: random.Random
) -> SimUser | None:
    if len(taken) >= len(pool):
        return None
    for _ in range(64):
        user = rng.choice(pool)
        if user.id not in taken:
            return user
    return next((u for u in pool if u.id not in taken), None)


def _make_user(
    scenario: Scenario, rng: random.Random, ids: RandomSnowflakes
) -> SimUser:
    handle = names.username(rng)
    user = SimUser(
        id=ids.make(),
        username=handle,
        global_name=names.display_name(handle),
        bot=rng.random() < scenario.bot_fraction,
        avatar=f"{rng.getrandbits(128):032x}" if rng.random() < 0.7 else None,
    )
    if rng.random() < scenario.online_fraction:
        user.status = rng.choices(("online", "idle", "dnd"), weights=(7, 2, 1))[0]
        user.client_status = {rng.choice(("desktop", "mobile", "web")): user.status}
        if rng.random() < scenario.activity_fraction:
            user.activities = [_activity(rng)]
    return user


def _activity(rng: random.Random) -> dict[str, object]:
    kind = rng.random()
    if kind < 0.6:
        return {"type": 0, "name": names.game(rng), "created_at": ERA_END_MS}
    if kind < 0.8:
        return {"type": 3, "name": "YouTube", "created_at": ERA_END_MS}
    return {
        "type": 4,
        "name": "Custom Status",
        "state": names.sentence(rng)[:40],
        "created_at": ERA_END_MS,
    }
