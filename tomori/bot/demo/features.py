"""Demo per-server features: whitelists, overrides, sprites, spotlights, integrations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.utils import timezone

from tomori.bot.demo.base import SPRITE_NAMES, Seed, text_channels, user_pks
from tomori.domain import models as m


def seed_features(
    seed: Seed,
    configured: Sequence[m.Server],
    personas: dict[int, list[m.Persona]],
    llms: Sequence[m.Llm],
) -> None:
    """Spread the per-server features over the configured servers."""
    # The busiest guild is never whitelisted, so most demo traffic is answered.
    _seed_whitelists(seed, configured[1:] or configured, personas)
    _seed_channel_overrides(seed, configured, llms)
    _seed_sprites(seed, configured, personas)
    _seed_spotlights(seed, configured, personas)
    _seed_blacklist(seed, configured)
    _seed_integrations(seed, configured)


def _seed_whitelists(
    seed: Seed, servers: Sequence[m.Server], personas: dict[int, list[m.Persona]]
) -> None:
    chosen = seed.pick(servers, "whitelist")
    channels: list[m.WhitelistedChannel] = []
    roles: list[m.WhitelistedRole] = []
    for index, server in enumerate(chosen):
        guild = seed.guilds[server.pk]
        texts = text_channels(guild)
        for channel_id in texts[: max(1, len(texts) // 2)]:
            channels.append(
                m.WhitelistedChannel(server=server, channel_disc_id=channel_id)
            )
        member_roles = sorted({r for mb in guild.members.values() for r in mb.roles})
        if index % 2 == 1 and member_roles:  # every other one also restricts by role
            roles.append(m.WhitelistedRole(server=server, role_disc_id=member_roles[0]))
    m.Server.objects.filter(pk__in=[s.pk for s in chosen]).update(
        channel_whitelist_enabled=True
    )
    created = m.WhitelistedChannel.objects.bulk_create(channels)
    _restrict_first_channel(created, personas)
    seed.add("whitelisted_servers", len(chosen))
    seed.add("whitelisted_channels", created)
    seed.add("whitelisted_roles", m.WhitelistedRole.objects.bulk_create(roles))


def _restrict_first_channel(
    rows: Sequence[m.WhitelistedChannel], personas: dict[int, list[m.Persona]]
) -> None:
    """Restrict each server's first whitelisted channel to its main persona."""
    through = m.WhitelistedChannel.personas.through
    seen: set[int] = set()
    links = []
    for row in rows:
        if row.server_id in seen:
            continue
        seen.add(row.server_id)
        main = personas[row.server_id][0]
        links.append(through(whitelistedchannel_id=row.pk, persona_id=main.pk))
    through.objects.bulk_create(links)


def _seed_channel_overrides(
    seed: Seed, servers: Sequence[m.Server], llms: Sequence[m.Llm]
) -> None:
    prompts, overrides = [], []
    for server in seed.pick(servers, "prompt_override"):
        channel_id = text_channels(seed.guilds[server.pk])[0]
        prompts.append(
            m.ChannelPromptOverride(
                server=server,
                channel_disc_id=channel_id,
                prompt="Answer in the style of a ship's log.",
                mode=seed.rng.choice(("append", "replace")),
            )
        )
    for server in seed.pick(servers, "llm_override"):
        channel_id = text_channels(seed.guilds[server.pk])[-1]
        overrides.append(
            m.ChannelLlmOverride(
                server=server, channel_disc_id=channel_id, llm=seed.rng.choice(llms)
            )
        )
    seed.add("channel_prompts", m.ChannelPromptOverride.objects.bulk_create(prompts))
    seed.add("channel_llms", m.ChannelLlmOverride.objects.bulk_create(overrides))


def _seed_sprites(
    seed: Seed, servers: Sequence[m.Server], personas: dict[int, list[m.Persona]]
) -> None:
    rows = [
        m.PersonaSprite(
            persona=persona,
            name=name,
            position=i,
            image_url=f"https://sprites.example.invalid/{persona.pk}/{name}.png",
            instructions=f"Use when the mood is {name}.",
        )
        for server in seed.pick(servers, "sprites")
        for persona in personas[server.pk]
        for i, name in enumerate(SPRITE_NAMES)
    ]
    seed.add("sprites", m.PersonaSprite.objects.bulk_create(rows))


def _seed_spotlights(
    seed: Seed,
    servers: Sequence[m.Server],
    personas: dict[int, list[m.Persona]],
) -> None:
    wanted: list[tuple[m.Server, int, int, m.Persona]] = []
    for server in seed.pick(servers, "spotlight"):
        guild = seed.guilds[server.pk]
        humans = [u for u, mb in guild.members.items() if not mb.user.bot]
        persona = personas[server.pk][-1]  # an alter when there is one
        for user_disc_id in seed.rng.sample(humans, min(5, len(humans))):
            channel_id = seed.rng.choice(text_channels(guild))
            wanted.append((server, user_disc_id, channel_id, persona))
    users = user_pks(w[1] for w in wanted)
    expires = timezone.now() + timedelta(days=30)
    rows = [
        m.PersonalSpotlight(
            server=server,
            user_id=users[user],
            channel_disc_id=channel,
            persona=persona,
            expires_at=expires,
        )
        for server, user, channel, persona in wanted
        if user in users
    ]
    seed.add("spotlights", m.PersonalSpotlight.objects.bulk_create(rows))


def _seed_blacklist(seed: Seed, servers: Sequence[m.Server]) -> None:
    wanted: list[tuple[m.Server, int]] = []
    for server in seed.pick(servers, "blacklist"):
        guild = seed.guilds[server.pk]
        humans = sorted(u for u, mb in guild.members.items() if not mb.user.bot)
        # A few quiet members: the chatty ones come first in traffic draws.
        count = max(1, len(humans) // 50)
        wanted += [
            (server, u) for u in seed.rng.sample(humans, min(count, len(humans)))
        ]
    users = user_pks(u for _, u in wanted)
    rows = [
        m.UserBlacklist(server=server, user_id=users[u], reason="demo")
        for server, u in wanted
        if u in users
    ]
    seed.add("blacklisted", m.UserBlacklist.objects.bulk_create(rows))


def _seed_integrations(seed: Seed, servers: Sequence[m.Server]) -> None:
    mcp = [
        m.GuildMcpServerConfig(
            server=server,
            name="search",
            url="https://mcp.example.invalid/search",
            tool_names=["web_search", "fetch_page"],
        )
        for server in seed.pick(servers, "mcp")
    ]
    seed.add("mcp_configs", m.GuildMcpServerConfig.objects.bulk_create(mcp))
    presets = m.StPreset.objects.bulk_create(
        [
            m.StPreset(server=server, name="Roleplay", is_active=True)
            for server in seed.pick(servers, "st_preset")
        ]
    )
    nodes = [
        m.StPresetNode(preset=preset, position=i, role=role, content=content)
        for preset in presets
        for i, (role, content) in enumerate(
            (("system", "Stay in character."), ("system", "Keep replies short."))
        )
    ]
    m.StPresetNode.objects.bulk_create(nodes)
    seed.add("st_presets", presets)
    subscriptions = [
        m.NovelAiSubscription(server=server, tier="opus", context_limit=8192)
        for server in seed.pick(servers, "novelai")
    ]
    seed.add("novelai", m.NovelAiSubscription.objects.bulk_create(subscriptions))


def seed_expressions(seed: Seed, servers: Sequence[m.Server]) -> None:
    """Store each guild's emojis and stickers as synced now."""
    rows: list[m.ServerExpression] = []
    syncs: list[m.ServerExpressionSync] = []
    now = timezone.now()
    for server in servers:
        guild = seed.guilds[server.pk]
        rows += [
            m.ServerExpression(
                server=server,
                kind="emoji",
                expression_disc_id=e.id,
                name=e.name[:100],
                animated=e.animated,
            )
            for e in guild.emojis
        ]
        rows += [
            m.ServerExpression(
                server=server,
                kind="sticker",
                expression_disc_id=s.id,
                name=s.name[:100],
                description=s.description[:200],
            )
            for s in guild.stickers
        ]
        syncs.append(
            m.ServerExpressionSync(
                server=server,
                emoji_count=len(guild.emojis),
                sticker_count=len(guild.stickers),
                last_synced_at=now,
            )
        )
    m.ServerExpression.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
    seed.add("expressions", len(rows))
    m.ServerExpressionSync.objects.bulk_create(syncs)
