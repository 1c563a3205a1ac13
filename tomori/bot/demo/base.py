"""Demo rows shared by every server: LLMs, preset personas, users, servers, personas."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tomori.bot.simulator.world import TEXT_CHANNEL, SimGuild, World
from tomori.domain import models as m

# (provider, codename, default, tools, vision, context)
DEMO_LLMS = (
    ("openrouter", "openai/gpt-4o-mini", True, True, True, 128_000),
    ("openrouter", "anthropic/claude-3.5-haiku", False, True, True, 200_000),
    ("openrouter", "google/gemini-2.0-flash-001", False, True, True, 1_048_576),
    ("openrouter", "mistralai/mistral-7b-instruct:free", False, False, False, 32_768),
    ("google", "gemini-2.5-flash", True, True, True, 1_048_576),
    ("google", "gemini-2.5-pro", False, True, True, 1_048_576),
    ("novelai", "llama-3-erato-v1", True, False, False, 8_192),
)
ALTER_NAMES = ("Mika", "Rin", "Aoi", "Haru", "Sora", "Kaede", "Yui", "Nagi")
SPRITE_NAMES = ("neutral", "happy", "thinking", "surprised")
PRESET_PERSONAS = (
    ("Tomori (classic)", "The original cheerful assistant."),
    ("Librarian", "Quiet, precise, fond of footnotes."),
    ("Game master", "Runs tabletop scenes and keeps score."),
)

# Shares of configured servers that get each feature (at least one server each).
FEATURE_SHARES = {
    "whitelist": 0.05,
    "prompt_override": 0.10,
    "llm_override": 0.10,
    "sprites": 0.20,
    "spotlight": 0.03,
    "mcp": 0.10,
    "st_preset": 0.10,
    "novelai": 0.05,
    "blacklist": 0.10,
}


@dataclass
class Seed:
    """The rows being built for the new servers, and what was created."""

    rng: random.Random
    guilds: dict[int, SimGuild]  # server pk -> guild
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, created: Sequence[Any] | int) -> None:
        amount = created if isinstance(created, int) else len(created)
        self.counts[name] = self.counts.get(name, 0) + amount

    def pick(self, servers: Sequence[m.Server], feature: str) -> list[m.Server]:
        """Return a seeded sample of `servers` for a feature (at least one)."""
        if not servers:
            return []
        wanted = max(1, round(len(servers) * FEATURE_SHARES[feature]))
        return self.rng.sample(list(servers), min(wanted, len(servers)))


@dataclass(frozen=True)
class Llms:
    all: list[m.Llm]
    created: list[m.Llm]


def seed_llms() -> Llms:
    """Create the demo LLMs that are missing (one default per provider)."""
    existing = {(r.provider, r.codename): r for r in m.Llm.objects.all()}
    missing = [
        m.Llm(
            provider=provider,
            codename=codename,
            display_name=codename.split("/")[-1],
            is_default=default,
            supports_tools=tools,
            supports_vision=vision,
            context_length=context,
        )
        for provider, codename, default, tools, vision, context in DEMO_LLMS
        if (provider, codename) not in existing
    ]
    # A provider that already has a default keeps it (one default per provider).
    defaults = {r.provider for r in existing.values() if r.is_default}
    for row in missing:
        row.is_default = row.is_default and row.provider not in defaults
    created = m.Llm.objects.bulk_create(missing)
    wanted = {(p, c) for p, c, *_ in DEMO_LLMS}
    rows = [r for r in m.Llm.objects.all() if (r.provider, r.codename) in wanted]
    return Llms(all=rows, created=created)


def seed_presets() -> int:
    """Create the demo preset personas that are missing; return how many."""
    names = set(m.PresetPersona.objects.values_list("name", flat=True))
    rows = [
        m.PresetPersona(name=name, description=description)
        for name, description in PRESET_PERSONAS
        if name not in names
    ]
    return len(m.PresetPersona.objects.bulk_create(rows))


def seed_users(world: World) -> int:
    """Create a user row per non-bot user of the world; return how many were new."""
    humans = [u for u in world.users.values() if not u.bot]
    before = m.User.objects.count()
    m.User.objects.bulk_create(
        [m.User(user_disc_id=u.id, username=u.username[:100]) for u in humans],
        ignore_conflicts=True,
        batch_size=2000,
    )
    return m.User.objects.count() - before


def new_guilds(world: World) -> list[SimGuild]:
    """Return the world's guilds that have no server row yet, largest first."""
    ids = list(world.guilds)
    existing: set[int] = set()
    for start in range(0, len(ids), 500):  # bounded IN lists (SQLite)
        chunk = ids[start : start + 500]
        existing.update(
            m.Server.objects.filter(server_disc_id__in=chunk).values_list(
                "server_disc_id", flat=True
            )
        )
    # Largest first, so "the first configured server" is the busiest guild.
    guilds = sorted(world.guilds.values(), key=lambda g: (-g.member_count, g.id))
    return [g for g in guilds if g.id not in existing]


def seed_servers(seed: Seed, guilds: Sequence[SimGuild]) -> list[m.Server]:
    """Create a server row per guild (in the order given)."""
    servers = m.Server.objects.bulk_create(
        [m.Server(server_disc_id=g.id, name=g.name[:100]) for g in guilds]
    )
    seed.guilds = {s.pk: g for s, g in zip(servers, guilds, strict=True)}
    return servers


def seed_configs(
    seed: Seed,
    servers: Sequence[m.Server],
    llms: Sequence[m.Llm],
    configured_fraction: float,
) -> list[m.Server]:
    """Give every server a model config; most an API key. Return the configured."""
    rng = seed.rng
    # The busiest guild is always configured, so the demo has turns to show.
    configured = [
        s for i, s in enumerate(servers) if i == 0 or rng.random() < configured_fraction
    ]
    keyed = {s.pk for s in configured}
    rows = [
        m.ServerModelConfig(
            server=s,
            llm=rng.choice(llms),
            api_key=f"sk-demo-{rng.getrandbits(64):016x}" if s.pk in keyed else None,
            temperature=round(rng.uniform(0.6, 1.2), 2),
        )
        for s in servers
    ]
    seed.add("model_configs", m.ServerModelConfig.objects.bulk_create(rows))
    seed.add("configured_servers", len(configured))
    return configured


def seed_personas(
    seed: Seed, servers: Sequence[m.Server]
) -> dict[int, list[m.Persona]]:
    """Give every server a main persona and up to three alters; return them by server."""
    rows: list[m.Persona] = []
    for server in servers:
        rows.append(m.Persona(server=server, name="Tomori", is_main=True))
        alters = seed.rng.sample(ALTER_NAMES, seed.rng.randint(0, 3))
        rows += [
            m.Persona(server=server, name=name, position=i + 1)
            for i, name in enumerate(alters)
        ]
    created = m.Persona.objects.bulk_create(rows)
    seed.add("personas", created)
    by_server: dict[int, list[m.Persona]] = {}
    for persona in created:
        by_server.setdefault(persona.server_id, []).append(persona)
    return by_server


def text_channels(guild: SimGuild) -> list[int]:
    """Return the ids of a guild's text channels."""
    return [c.id for c in guild.channels if c.type == TEXT_CHANNEL]


def user_pks(user_disc_ids: Iterable[int]) -> dict[int, int]:
    """Return {user_disc_id: user pk} for the ids that have a row."""
    ids = sorted(set(user_disc_ids))
    found: dict[int, int] = {}
    for start in range(0, len(ids), 500):
        found.update(
            m.User.objects.filter(
                user_disc_id__in=ids[start : start + 500]
            ).values_list("user_disc_id", "pk")
        )
    return found
