"""Demo data for the simulated guilds: servers, personas, users and per-server features.

`seed_world(world)` writes, in one transaction and with bulk inserts, what
the bot's caches read for the guilds of a simulator World. It is idempotent:
guilds that already have a server row are left alone (their features are
not re-rolled), and users, LLMs and preset personas that exist are skipped.
Unconfigured servers (no API key) still get a main persona, so their "not
configured" answer is cached like any other state instead of being looked up
on every message.
"""

from __future__ import annotations

import random

from django.db import transaction

from tomori.bot.demo.base import (
    DEMO_LLMS,
    FEATURE_SHARES,
    Seed,
    new_guilds,
    seed_configs,
    seed_llms,
    seed_personas,
    seed_presets,
    seed_servers,
    seed_users,
)
from tomori.bot.demo.features import seed_expressions, seed_features
from tomori.bot.simulator.world import World

__all__ = ["DEMO_LLMS", "FEATURE_SHARES", "seed_world"]


def seed_world(
    world: World, *, configured_fraction: float = 0.9, seed: int = 1
) -> dict[str, int]:
    """Write demo rows for every guild of `world` that has none yet; return counts."""
    rng = random.Random(f"demo:{seed}")
    with transaction.atomic():
        llms = seed_llms()
        counts = {"llms": len(llms.created), "preset_personas": seed_presets()}
        counts["users"] = seed_users(world)
        guilds = new_guilds(world)
        if not guilds:
            return counts | {"servers": 0}
        seed_state = Seed(rng=rng, guilds={})
        servers = seed_servers(seed_state, guilds)
        configured = seed_configs(seed_state, servers, llms.all, configured_fraction)
        personas = seed_personas(seed_state, servers)
        seed_features(seed_state, configured, personas, llms.all)
        seed_expressions(seed_state, servers)
    return counts | {"servers": len(servers)} | seed_state.counts
