"""Model-based: random writes through every path against the real layers; no read is stale.

A hypothesis state machine over a small world of real rows. Each rule runs
one write path (model save, queryset update and delete, bulk create and
update, an upsert, update_or_create, many-to-many changes from both sides,
raw SQL through `raw_write` and `record_change`, the admin's delete action) inside a committed transaction, a rolled-back one, or a
savepoint that rolls back next to a write that commits. The invariant,
checked after every step: every read through a registered layer's public
getter equals what the database says (the layer emptied and read again).

Bounded and deterministic: `derandomize=True` and no example database, so
CI runs the same examples every time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from caches.invalidation import raw_write, record_change
from tests.caches.invalidation import probes
from tests.caches.invalidation.conftest import Layers, Probe, World
from tomori.domain import models as m

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
]

SETTINGS = settings(
    derandomize=True,
    database=None,
    max_examples=5,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

MODES = st.sampled_from(["commit", "commit", "rollback", "savepoint"])
PICK = st.integers(min_value=0, max_value=1_000)
CHANNELS = (1, 2, 3)
ROLE = 5
WEBHOOK_CHANNEL = 9


class Rollback(Exception):
    """Raised to roll a block back."""


class Invalidation(RuleBasedStateMachine):
    """Writes through random paths; reads through the real layers."""

    def __init__(self, layers: Layers, world: World, admin: Client) -> None:
        super().__init__()
        self.layers, self.world, self.admin = layers, world, admin
        self.llms = [world.llm(), world.llm()]
        self.servers = [world.server(), world.server()]
        self.users = [world.user(), world.user()]
        self.names = 0
        self.persona_ids: set[int] = set()
        for server in self.servers:
            for _ in range(2):
                self.new_persona(server)
            m.StPreset.objects.create(server=server, name="st", is_active=True)
            m.GuildMcpServerConfig.objects.create(
                server=server, name="mcp", url="http://m"
            )
        self.channels = [
            m.WhitelistedChannel.objects.create(
                server=self.servers[0], channel_disc_id=c
            )
            for c in (1, 2)
        ]

    # ---------------------------------------------------------------- helpers

    def name(self) -> str:
        self.names += 1
        return f"p{self.names}"

    def new_persona(self, server: m.Server) -> m.Persona:
        persona = m.Persona.objects.create(server=server, name=self.name())
        self.persona_ids.add(persona.pk)
        return persona

    def personas(self) -> list[m.Persona]:
        """Return this world's personas that may move or go (not the mains)."""
        return list(
            m.Persona.objects.filter(server__in=self.servers, is_main=False).order_by(
                "id"
            )
        )

    def persona(self, pick: int) -> m.Persona | None:
        personas = self.personas()
        return personas[pick % len(personas)] if personas else None

    def server(self, pick: int) -> m.Server:
        return self.servers[pick % len(self.servers)]

    def user(self, pick: int) -> m.User:
        return self.users[pick % len(self.users)]

    def reads(self) -> list[Probe]:
        """Return every read worth checking, through each layer's getter."""
        reads: list[Probe] = []
        for server in self.servers:
            reads.append(probes.state(server))
            reads += [probes.whitelist(server, c) for c in CHANNELS]
            reads.append(probes.whitelist(server, 4, parent=1))  # a thread of 1
            reads.append(probes.whitelist(server, 1, roles=[ROLE]))
            reads += [probes.channel_prompt_override(server, c) for c in (1, 2)]
            reads.append(probes.channel_llm_override(server, 1))
            reads += [probes.expressions(server), probes.mcp_configs(server)]
            reads += [probes.novelai(server), probes.active_st_preset(server)]
            reads += [probes.spotlight(server, user, 1) for user in self.users]
            reads += [probes.blacklisted(server, user) for user in self.users]
        reads += [probes.user_row(user) for user in self.users]
        reads += [probes.sprites(pk) for pk in sorted(self.persona_ids)]
        # The channel webhook dressed as each persona, as the bot reads it now.
        everyone = m.Persona.objects.filter(server__in=self.servers).order_by("id")
        reads += [probes.persona_webhook(WEBHOOK_CHANNEL, p) for p in everyone]
        return reads

    def run(self, mode: str, write: Callable[[], Any]) -> None:
        """Run `write` committed, rolled back, or in a savepoint rolled back."""
        if mode == "commit":
            with transaction.atomic():
                write()
        elif mode == "rollback":
            try:
                with transaction.atomic():
                    write()
                    raise Rollback
            except Rollback:
                pass
        else:
            with transaction.atomic():
                try:
                    with transaction.atomic():
                        write()
                        raise Rollback
                except Rollback:
                    pass
                self.rename(0)  # a write next to it that commits

    def rename(self, pick: int) -> None:
        if persona := self.persona(pick):
            persona.name = self.name()
            persona.save(update_fields=["name"])

    # ---------------------------------------------------------------- reads

    @invariant()
    def no_read_is_stale(self) -> None:
        stale = self.layers.stale(*self.reads())
        assert stale == [], stale

    @rule(pick=PICK)
    def read(self, pick: int) -> None:
        reads = self.reads()
        self.layers.read(reads[pick % len(reads)])

    # ---------------------------------------------------------------- writes

    @rule(mode=MODES, pick=PICK)
    def save_rename(self, mode: str, pick: int) -> None:
        self.run(mode, lambda: self.rename(pick))

    @rule(mode=MODES, pick=PICK, to=PICK)
    def save_move(self, mode: str, pick: int, to: int) -> None:
        def write() -> None:
            if persona := self.persona(pick):
                persona.server = self.server(to)
                persona.save()

        self.run(mode, write)

    @rule(mode=MODES, pick=PICK, to=PICK)
    def update_move(self, mode: str, pick: int, to: int) -> None:
        def write() -> None:
            if persona := self.persona(pick):
                m.Persona.objects.filter(pk=persona.pk).update(server=self.server(to))

        self.run(mode, write)

    @rule(mode=MODES, to=PICK)
    def bulk_update_rename(self, mode: str, to: int) -> None:
        def write() -> None:
            personas = self.personas()[:3]
            for i, persona in enumerate(personas):
                persona.name = self.name()
                persona.server = self.server(to + i)
            m.Persona.objects.bulk_update(personas, ["name", "server"])

        self.run(mode, write)

    @rule(mode=MODES, pick=PICK)
    def bulk_create_sprites(self, mode: str, pick: int) -> None:
        def write() -> None:
            if persona := self.persona(pick):
                m.PersonaSprite.objects.bulk_create(
                    [
                        m.PersonaSprite(
                            persona=persona, name=self.name(), image_url="http://x"
                        )
                        for _ in range(2)
                    ]
                )

        self.run(mode, write)

    @rule(mode=MODES, pick=PICK)
    def delete_sprite(self, mode: str, pick: int) -> None:
        def write() -> None:
            sprites = list(
                m.PersonaSprite.objects.filter(persona_id__in=self.persona_ids)
            )
            if sprites:
                sprites[pick % len(sprites)].delete()

        self.run(mode, write)

    @rule(mode=MODES, pick=PICK)
    def queryset_delete_sprites(self, mode: str, pick: int) -> None:
        def write() -> None:
            if persona := self.persona(pick):
                m.PersonaSprite.objects.filter(persona=persona).delete()

        self.run(mode, write)

    @rule(mode=MODES, server=PICK, channel=st.sampled_from((1, 2)))
    def update_or_create_prompt(self, mode: str, server: int, channel: int) -> None:
        self.run(
            mode,
            lambda: m.ChannelPromptOverride.objects.update_or_create(
                server=self.server(server),
                channel_disc_id=channel,
                defaults={"prompt": self.name()},
            ),
        )

    @rule(mode=MODES, which=PICK, pick=PICK, op=st.integers(0, 4))
    def m2m_change(self, mode: str, which: int, pick: int, op: int) -> None:
        def write() -> None:
            channel = self.channels[which % len(self.channels)]
            channel.refresh_from_db()
            persona = self.persona(pick)
            if persona is None:
                return
            # Linking another server's persona is rejected (the m2m pre_add
            # guard); a persona moved away after it was linked can be unlinked.
            own = persona.server_id == channel.server_id
            changes = [
                lambda: own and channel.personas.add(persona),
                lambda: channel.personas.remove(persona),
                lambda: channel.personas.clear(),
                lambda: own and persona.whitelisted_channels.add(channel),
                lambda: persona.whitelisted_channels.clear(),
            ]
            changes[op]()

        self.run(mode, write)

    @rule(mode=MODES, pick=PICK)
    def raw_sql_rename(self, mode: str, pick: int) -> None:
        # Declaring only tomori_state's key is not enough: the channel
        # webhook dressed as the persona keeps its old name (this machine
        # found that). So the raw write declares its change in model terms
        # and the rules derive every event.
        def write() -> None:
            if persona := self.persona(pick):
                row = {"id": persona.pk, "server_id": persona.server_id}
                name = self.name()
                with raw_write(), connection.cursor() as cursor:
                    cursor.execute(
                        "UPDATE personas SET name = %s WHERE id = %s",
                        [name, persona.pk],
                    )
                    record_change(
                        m.Persona,
                        {**row, "name": persona.name},
                        {**row, "name": name},
                    )

        self.run(mode, write)

    @rule(mode=MODES, server=PICK, llm=PICK)
    def upsert_channel_llm(self, mode: str, server: int, llm: int) -> None:
        self.run(
            mode,
            lambda: m.ChannelLlmOverride.objects.bulk_create(
                [
                    m.ChannelLlmOverride(
                        server=self.server(server),
                        channel_disc_id=1,
                        llm=self.llms[llm % len(self.llms)],
                    )
                ],
                update_conflicts=True,
                unique_fields=["server", "channel_disc_id"],
                update_fields=["llm"],
            ),
        )

    @rule(mode=MODES, server=PICK, user=PICK, pick=PICK)
    def spotlight_toggle(self, mode: str, server: int, user: int, pick: int) -> None:
        def write() -> None:
            spotlight = m.PersonalSpotlight.objects.filter(
                server=self.server(server), user=self.user(user), channel_disc_id=1
            )
            if spotlight.exists():
                spotlight.delete()
            elif persona := self.persona(pick):
                m.PersonalSpotlight.objects.create(
                    server=self.server(server),
                    user=self.user(user),
                    channel_disc_id=1,
                    persona=persona,
                )

        self.run(mode, write)

    @rule(mode=MODES, server=PICK, enabled=st.booleans())
    def expressions_change(self, mode: str, server: int, enabled: bool) -> None:
        def write() -> None:
            target = self.server(server)
            m.Server.objects.filter(pk=target.pk).update(emoji_usage_enabled=enabled)
            m.ServerExpression.objects.bulk_create(
                [
                    m.ServerExpression(
                        server=target,
                        kind="emoji",
                        expression_disc_id=self.world.next_id(),
                        name=self.name(),
                    )
                ]
            )

        self.run(mode, write)

    @rule(mode=MODES, server=PICK, enabled=st.booleans())
    def mcp_switch(self, mode: str, server: int, enabled: bool) -> None:
        def write() -> None:
            config = m.GuildMcpServerConfig.objects.get(
                server=self.server(server), name="mcp"
            )
            config.enabled = enabled
            config.save()

        self.run(mode, write)

    @rule(mode=MODES, server=PICK)
    def subscription_toggle(self, mode: str, server: int) -> None:
        def write() -> None:
            rows = m.NovelAiSubscription.objects.filter(server=self.server(server))
            if rows.exists():
                rows.delete()
            else:
                m.NovelAiSubscription.objects.get_or_create(
                    server=self.server(server),
                    defaults={"tier": "opus", "context_limit": 8192},
                )

        self.run(mode, write)

    @rule(mode=MODES, server=PICK)
    def st_preset_node(self, mode: str, server: int) -> None:
        def write() -> None:
            preset = m.StPreset.objects.get(server=self.server(server), name="st")
            m.StPresetNode.objects.create(preset=preset, content=self.name())

        self.run(mode, write)

    @rule(mode=MODES, pick=PICK)
    def admin_delete_action(self, mode: str, pick: int) -> None:
        def write() -> None:
            if persona := self.persona(pick):
                response = self.admin.post(
                    reverse("admin:tomori_persona_changelist"),
                    {
                        "action": "delete_selected",
                        "_selected_action": [persona.pk],
                        "post": "yes",
                    },
                )
                assert response.status_code == 302

        self.run(mode, write)

    @rule(mode=MODES, pick=PICK, language=st.sampled_from(["en", "fr", "ja"]))
    def user_change(self, mode: str, pick: int, language: str) -> None:
        def write() -> None:
            user = m.User.objects.get(pk=self.user(pick).pk)
            user.language = language
            user.save(update_fields=["language"])

        self.run(mode, write)

    @rule(mode=MODES, server=PICK, user=PICK)
    def blacklist_toggle(self, mode: str, server: int, user: int) -> None:
        def write() -> None:
            found = m.UserBlacklist.objects.filter(
                server=self.server(server), user=self.user(user)
            ).first()
            if found is None:
                m.UserBlacklist.objects.create(
                    server=self.server(server), user=self.user(user)
                )
            else:
                found.delete()

        self.run(mode, write)

    @rule(mode=MODES, create=st.booleans(), pick=PICK)
    def persona_create_or_delete(self, mode: str, create: bool, pick: int) -> None:
        def write() -> None:
            persona = self.persona(pick)
            if create or persona is None:
                self.new_persona(self.server(pick))
            else:
                persona.delete()

        self.run(mode, write)

    @rule(mode=MODES, which=PICK, to=st.sampled_from(CHANNELS))
    def whitelist_move(self, mode: str, which: int, to: int) -> None:
        def write() -> None:
            channel = m.WhitelistedChannel.objects.get(
                pk=self.channels[which % len(self.channels)].pk
            )
            taken = set(
                m.WhitelistedChannel.objects.filter(
                    server_id=channel.server_id
                ).values_list("channel_disc_id", flat=True)
            )
            if to not in taken:
                channel.channel_disc_id = to
                channel.save()

        self.run(mode, write)

    @rule(mode=MODES, server=PICK, enabled=st.booleans())
    def whitelist_switch(self, mode: str, server: int, enabled: bool) -> None:
        self.run(
            mode,
            lambda: m.Server.objects.filter(pk=self.server(server).pk).update(
                channel_whitelist_enabled=enabled
            ),
        )

    @rule(mode=MODES, server=PICK)
    def role_toggle(self, mode: str, server: int) -> None:
        def write() -> None:
            roles = m.WhitelistedRole.objects.filter(server=self.server(server))
            if roles.exists():
                roles.delete()
            else:
                m.WhitelistedRole.objects.create(
                    server=self.server(server), role_disc_id=ROLE
                )

        self.run(mode, write)


def test_no_read_through_a_layer_is_stale_after_any_write(
    layers: Layers, world: World, admin_client: Client
) -> None:
    run_state_machine_as_test(
        lambda: Invalidation(layers, world, admin_client), settings=SETTINGS
    )
