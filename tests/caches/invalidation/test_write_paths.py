"""Every write path invalidates the real layer it feeds.

Each test warms a registered layer through its public getter (the second
read makes no query), writes through one path inside a committed block
(`django_capture_on_commit_callbacks(execute=True)`), and reads again through
the getter: the layer must serve the new value.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import F

from caches import rules
from caches.invalidation import Event, capture, raw_write, record_change
from caches.layers import tomori_state, webhook
from caches.layers.preset_avatar import PNG_SIGNATURE
from caches.registry import registry
from tests.caches.invalidation import probes
from tests.caches.invalidation.conftest import Layers, Probe, World
from tomori.domain import models as m

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres")]


def names(state: Any) -> tuple[str, ...]:
    """Return the persona names of a TomoriState (main first)."""
    return tuple(p.name for p in state.personas)


def test_save_invalidates_the_servers_tomori_state(layers, world, commit):
    server = world.server()
    persona = world.persona(server, name="before")
    state = probes.state(server)
    assert names(layers.warm(state)[0]) == ("main", "before")

    with commit():
        persona.name = "after"
        persona.save()

    assert names(layers.read(state)) == ("main", "after")


def test_persona_moved_to_another_server_invalidates_both(layers, world, commit):
    first, second = world.server(), world.server()
    persona = world.persona(first)
    layers.warm(probes.state(first), probes.state(second))

    with commit():
        persona.server = second
        persona.save(update_fields=["server"])

    assert names(layers.read(probes.state(first))) == ("main",)
    assert [p.id for p in layers.read(probes.state(second)).personas][1:] == [
        persona.id
    ]


def test_save_of_a_stale_instance_uses_the_stored_old_key(layers, world, commit):
    first, second, third = world.server(), world.server(), world.server()
    persona = world.persona(first, name="moving")
    stale_copy = m.Persona.objects.get(pk=persona.pk)
    with commit():
        m.Persona.objects.filter(pk=persona.pk).update(server=second)
    assert "moving" in names(layers.warm(probes.state(second))[0])

    with commit():
        stale_copy.server = third
        stale_copy.save()

    assert "moving" not in names(layers.read(probes.state(second)))
    assert "moving" in names(layers.read(probes.state(third)))


def test_delete_invalidates(layers, world, commit):
    server = world.server()
    persona = world.persona(server)
    layers.warm(probes.state(server))

    with commit():
        persona.delete()

    assert names(layers.read(probes.state(server))) == ("main",)


def test_parent_delete_cascades_invalidate_every_child_cache(layers, world, commit):
    server = world.server()
    persona = world.persona(server)
    llm = world.llm()
    m.PersonaSprite.objects.create(
        persona=persona, name="smile", image_url="http://x/1"
    )
    m.ChannelLlmOverride.objects.create(server=server, channel_disc_id=7, llm=llm)
    m.ChannelPromptOverride.objects.create(server=server, channel_disc_id=7, prompt="p")
    m.GuildMcpServerConfig.objects.create(server=server, name="mcp", url="http://m")
    reads = [
        probes.state(server),
        probes.sprites(persona.id),
        probes.channel_llm_override(server, 7),
        probes.channel_prompt_override(server, 7),
        probes.mcp_configs(server),
        probes.expressions(server),
    ]
    before = layers.warm(*reads)

    with commit():
        server.delete()

    after = [layers.read(p) for p in reads]
    assert after[:4] == [None, (), None, None]
    assert all(was != now for was, now in zip(before, after, strict=True))
    assert layers.stale(*reads) == []


def test_cascade_from_one_delete_is_one_batch(world, commit, local_bus):
    server = world.server()
    for _ in range(5):
        persona = world.persona(server)
        m.PersonaSprite.objects.create(persona=persona, name="s", image_url="http://x")

    with commit() as callbacks:
        server.delete()

    assert len(callbacks) == 1
    assert local_bus.snapshot()["local"] == 1


def test_set_null_from_a_deleted_llm_invalidates_the_rows_it_rewrote(
    layers, world, commit
):
    server = world.server()
    llm = world.llm()
    world.persona(server, llm=llm)
    m.ServerModelConfig.objects.create(server=server, llm=llm)
    state, llm_row = probes.state(server), probes.llm_row(llm)
    warm_state, warm_llm = layers.warm(state, llm_row)
    assert warm_state.llm_id == llm.id and warm_llm.id == llm.id

    with commit():
        llm.delete()

    after = layers.read(state)
    assert after.llm_id is None
    assert [p.llm_id for p in after.personas] == [None, None]
    assert layers.read(llm_row) is None


def test_queryset_update_invalidates_old_and_new_keys(layers, world, commit):
    first, second = world.server(), world.server()
    world.persona(first)
    world.persona(first)
    layers.warm(probes.state(first), probes.state(second))

    with commit():
        count = m.Persona.objects.filter(server=first, is_main=False).update(
            server=second
        )

    assert count == 2
    assert names(layers.read(probes.state(first))) == ("main",)
    assert len(layers.read(probes.state(second)).personas) == 3


def test_queryset_update_with_an_expression(layers, world, commit):
    server = world.server()
    persona = world.persona(server)
    m.PersonaSprite.objects.create(persona=persona, name="s", image_url="http://x")
    sprites = probes.sprites(persona.id)
    assert layers.warm(sprites)[0][0].position == 0

    with commit():
        m.PersonaSprite.objects.filter(persona=persona).update(
            position=F("position") + 5
        )

    assert layers.read(sprites)[0].position == 5


def test_queryset_update_of_an_irrelevant_column_records_nothing(world, commit):
    server = world.server()
    mcp = m.GuildMcpServerConfig.objects.create(server=server, name="a", url="http://a")

    with capture() as seen, commit():
        m.GuildMcpServerConfig.objects.filter(pk=mcp.pk).update(
            display_metadata={"icon": "x"}
        )

    assert seen.recorded == []


def test_queryset_delete_invalidates(layers, world, commit):
    server = world.server()
    persona = world.persona(server)
    m.PersonaSprite.objects.create(persona=persona, name="a", image_url="http://x/a")
    m.PersonaSprite.objects.create(persona=persona, name="b", image_url="http://x/b")
    sprites = probes.sprites(persona.id)
    layers.warm(sprites)

    with commit():
        m.PersonaSprite.objects.filter(persona=persona, name="a").delete()

    assert [s.name for s in layers.read(sprites)] == ["b"]


def test_bulk_create_invalidates(layers, world, commit):
    server = world.server()
    persona = world.persona(server)
    sprites, expressions = probes.sprites(persona.id), probes.expressions(server)
    _, stored = layers.warm(sprites, expressions)

    with commit():
        m.PersonaSprite.objects.bulk_create(
            [
                m.PersonaSprite(persona=persona, name=n, image_url="http://x")
                for n in "ab"
            ]
        )
        m.ServerExpression.objects.bulk_create(
            [
                m.ServerExpression(
                    server=server, kind="emoji", expression_disc_id=1, name="e"
                )
            ]
        )

    assert len(layers.read(sprites)) == 2
    assert layers.read(expressions) != stored
    assert layers.stale(sprites, expressions) == []


def _png(tmp_path: Path, name: str, body: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(PNG_SIGNATURE + b"\x00\x00\x00\x0dIHDR" + body)
    return str(path)


def test_bulk_create_without_primary_keys_drops_the_pk_keyed_caches(
    layers, commit, tmp_path
):
    preset = m.PresetPersona.objects.create(
        name="p1", avatar_path=_png(tmp_path, "a.png", b"old")
    )
    avatar = probes.preset_avatar_of(preset)
    assert layers.warm(avatar)[0].png.endswith(b"old")
    m.PresetPersona.objects.filter(pk=preset.pk).update(
        avatar_path=_png(tmp_path, "b.png", b"new")
    )  # outside the committed block: its invalidation never runs

    with capture() as seen, commit():
        m.PresetPersona.objects.bulk_create(
            [m.PresetPersona(name="p1"), m.PresetPersona(name="p2")],
            ignore_conflicts=True,
        )

    assert Event("preset_avatar", "all") in seen.dispatched
    assert layers.read(avatar).png.endswith(b"new")


def test_bulk_create_upsert_that_moves_keys_drops_the_caches(layers, world, commit):
    server = world.server()
    llm = world.llm()
    m.ChannelLlmOverride.objects.create(server=server, channel_disc_id=9, llm=llm)
    override = probes.channel_llm_override(server, 9)
    assert layers.warm(override) == [llm.id]
    replacement = world.llm()

    with commit():
        m.ChannelLlmOverride.objects.bulk_create(
            [m.ChannelLlmOverride(server=server, channel_disc_id=9, llm=replacement)],
            update_conflicts=True,
            unique_fields=["server", "channel_disc_id"],
            update_fields=["llm"],
        )

    assert layers.read(override) == replacement.id


def test_bulk_update_invalidates_old_and_new_keys(layers, world, commit):
    first, second = world.server(), world.server()
    personas = [world.persona(first), world.persona(first)]
    layers.warm(probes.state(first), probes.state(second))
    for persona in personas:
        persona.server = second
        persona.name = persona.name + "-moved"

    with commit():
        m.Persona.objects.bulk_update(personas, ["server", "name"], batch_size=1)

    assert names(layers.read(probes.state(first))) == ("main",)
    assert names(layers.read(probes.state(second)))[1:] == tuple(
        p.name for p in personas
    )


def test_update_or_create_and_get_or_create(layers, world, commit):
    server = world.server()
    prompt = probes.channel_prompt_override(server, 11)
    assert layers.warm(prompt) == [None]

    with commit():
        m.ChannelPromptOverride.objects.update_or_create(
            server=server, channel_disc_id=11, defaults={"prompt": "first"}
        )
    assert layers.read(prompt).prompt == "first"

    with commit():
        m.ChannelPromptOverride.objects.update_or_create(
            server=server, channel_disc_id=11, defaults={"prompt": "second"}
        )
    assert layers.read(prompt).prompt == "second"

    subscription = probes.novelai(server)
    assert layers.warm(subscription) == [None]
    with commit():
        m.NovelAiSubscription.objects.get_or_create(
            server=server, defaults={"tier": "opus", "context_limit": 8192}
        )
    record = layers.read(subscription)
    assert (record.tier, record.context_limit) == ("opus", 8192)


def _whitelisted_server(world: World) -> m.Server:
    return world.server(channel_whitelist_enabled=True)


def test_m2m_add_remove_clear_forward(layers, world, commit):
    server = _whitelisted_server(world)
    persona = world.persona(server)
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=21)
    channel = probes.whitelist(server, 21)
    thread = probes.whitelist(server, 99, parent=21)

    for change, expected in (
        (lambda: row.personas.add(persona), (persona.id,)),
        (lambda: row.personas.remove(persona), ()),
        (lambda: row.personas.set([persona]), (persona.id,)),
        (lambda: row.personas.clear(), ()),
    ):
        layers.warm(channel, thread)
        with commit():
            change()
        assert layers.read(channel).persona_ids == expected
        assert layers.read(thread).persona_ids == expected


def test_m2m_changes_from_the_persona_side(layers, world, commit):
    server = _whitelisted_server(world)
    persona = world.persona(server)
    rows = [
        m.WhitelistedChannel.objects.create(server=server, channel_disc_id=c)
        for c in (31, 32)
    ]
    reads = [probes.whitelist(server, c) for c in (31, 32)]

    for change, expected in (
        (lambda: persona.whitelisted_channels.add(*rows), [(persona.id,)] * 2),
        (lambda: persona.whitelisted_channels.remove(rows[0]), [(), (persona.id,)]),
        (lambda: persona.whitelisted_channels.clear(), [(), ()]),
    ):
        layers.warm(*reads)
        with commit():
            change()
        assert [layers.read(p).persona_ids for p in reads] == expected


def test_whitelist_row_moved_to_another_channel_invalidates_both(layers, world, commit):
    server = _whitelisted_server(world)
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=41)
    reads = [
        probes.whitelist(server, 41),
        probes.whitelist(server, 42),
        probes.whitelist(server, 43, parent=41),
    ]
    allowed = [d.channel_allowed for d in layers.warm(*reads)]
    assert allowed == [True, False, True]

    with commit():
        row.channel_disc_id = 42
        row.save()

    assert [layers.read(p).channel_allowed for p in reads] == [False, True, False]


def test_deleting_a_persona_invalidates_whitelist_restrictions(layers, world, commit):
    server = _whitelisted_server(world)
    persona = world.persona(server)
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=51)
    row.personas.add(persona)
    channel = probes.whitelist(server, 51)
    assert layers.warm(channel)[0].persona_ids == (persona.id,)

    with commit():
        persona.delete()

    assert layers.read(channel).persona_ids == ()


def test_raw_sql_write_declared_through_raw_write(layers, world, commit):
    server = world.server()
    persona = world.persona(server, name="raw-before")
    state = probes.state(server)
    dressed = probes.persona_webhook(70, persona)
    layers.warm(state, dressed)

    # A rename shows in the server's state and in every webhook dressed as
    # the persona: the raw write declares both.
    touched = [
        Event(tomori_state.NAME, "key", (server.server_disc_id,)),
        Event(webhook.NAME, "persona", (persona.id,)),
    ]
    with commit(), raw_write(*touched), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE personas SET name = %s WHERE id = %s", ["raw-after", persona.id]
        )

    assert names(layers.read(state)) == ("main", "raw-after")
    assert layers.read(probes.persona_webhook(70, persona)).username == "raw-after"


def test_raw_sql_write_declared_as_a_model_change(layers, world, commit):
    first, second = world.server(), world.server()
    persona = world.persona(first)
    layers.warm(probes.state(first), probes.state(second))

    with commit():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE personas SET server_id = %s WHERE id = %s",
                [second.id, persona.id],
            )
        record_change(
            m.Persona,
            {"id": persona.id, "server_id": first.id, "name": persona.name},
            {"id": persona.id, "server_id": second.id, "name": persona.name},
        )

    assert names(layers.read(probes.state(first))) == ("main",)
    assert names(layers.read(probes.state(second))) == ("main", persona.name)


def test_raw_write_that_raises_records_nothing(world, commit):
    server = world.server()

    touched = Event(tomori_state.NAME, "key", (server.server_disc_id,))
    with capture() as seen, commit(), pytest.raises(RuntimeError), raw_write(touched):
        raise RuntimeError("the SQL failed")

    assert seen.recorded == [] and seen.dispatched == []


# ------------------------------------------------ every model-fed layer


class Fixture:
    """The rows of the every-layer matrix, made once per test."""

    def __init__(self, world: World, tmp_path: Path) -> None:
        self.server = world.server()
        self.user = world.user(language="en")
        self.llm = world.llm()
        self.persona = world.persona(self.server, name="speaker")
        self.preset = m.PresetPersona.objects.create(
            name=f"preset-{world.next_id()}",
            avatar_path=_png(tmp_path, "old.png", b"old"),
        )
        self.st = m.StPreset.objects.create(
            server=self.server, name="st", is_active=True
        )
        self.mcp = m.GuildMcpServerConfig.objects.create(
            server=self.server, name="mcp", url="http://m"
        )
        self.tmp_path = tmp_path


#: A case returns how to build its read (built again after the write: a
#: caller passes what it knows now) and the write that must change it.
Written = tuple[Probe | Callable[[], Probe], Callable[[], object]]
Case = Callable[[Fixture], Written]


def _tomori_state(f: Fixture) -> Written:
    return probes.state(f.server), lambda: m.Persona.objects.filter(
        pk=f.persona.pk
    ).update(avatar_url="http://a/b")


def _user(f: Fixture) -> Written:
    return probes.user_row(f.user), lambda: m.User.objects.filter(pk=f.user.pk).update(
        language="fr"
    )


def _blacklist(f: Fixture) -> Written:
    return probes.blacklisted(f.server, f.user), lambda: m.UserBlacklist.objects.create(
        server=f.server, user=f.user
    )


def _whitelist(f: Fixture) -> Written:
    return probes.whitelist(f.server, 61), lambda: m.Server.objects.filter(
        pk=f.server.pk
    ).update(channel_whitelist_enabled=True)


def _whitelist_roles(f: Fixture) -> Written:
    m.Server.objects.filter(pk=f.server.pk).update(channel_whitelist_enabled=True)
    return probes.whitelist(
        f.server, 62, roles=[5]
    ), lambda: m.WhitelistedRole.objects.create(server=f.server, role_disc_id=6)


def _channel_llm(f: Fixture) -> Written:
    return probes.channel_llm_override(
        f.server, 63
    ), lambda: m.ChannelLlmOverride.objects.create(
        server=f.server, channel_disc_id=63, llm=f.llm
    )


def _channel_prompt(f: Fixture) -> Written:
    return probes.channel_prompt_override(
        f.server, 64
    ), lambda: m.ChannelPromptOverride.objects.create(
        server=f.server, channel_disc_id=64, prompt="p"
    )


def _emoji_sticker(f: Fixture) -> Written:
    return probes.expressions(f.server), lambda: m.Server.objects.filter(
        pk=f.server.pk
    ).update(emoji_usage_enabled=False)


def _persona_sprite(f: Fixture) -> Written:
    return probes.sprites(f.persona.pk), lambda: m.PersonaSprite.objects.create(
        persona=f.persona, name="wave", image_url="http://x"
    )


def _spotlight(f: Fixture) -> Written:
    return probes.spotlight(
        f.server, f.user, 65
    ), lambda: m.PersonalSpotlight.objects.create(
        server=f.server, user=f.user, channel_disc_id=65, persona=f.persona
    )


def _mcp(f: Fixture) -> Written:
    return probes.mcp_configs(f.server), lambda: m.GuildMcpServerConfig.objects.filter(
        pk=f.mcp.pk
    ).update(enabled=False)


def _st_preset(f: Fixture) -> Written:
    return probes.active_st_preset(f.server), lambda: m.StPresetNode.objects.create(
        preset=f.st, content="hello"
    )


def _novelai(f: Fixture) -> Written:
    return probes.novelai(f.server), lambda: m.NovelAiSubscription.objects.create(
        server=f.server, tier="opus", context_limit=8192
    )


def _llm(f: Fixture) -> Written:
    return probes.llm_row(f.llm), lambda: m.Llm.objects.filter(pk=f.llm.pk).update(
        is_default=True
    )


def _preset_avatar(f: Fixture) -> Written:
    new = _png(f.tmp_path, "new.png", b"new")
    return probes.preset_avatar_of(f.preset), lambda: m.PresetPersona.objects.filter(
        pk=f.preset.pk
    ).update(avatar_path=new)


def _webhook(f: Fixture) -> Written:
    return probes.channel_webhook(
        66, f.server
    ), lambda: m.ManagedWebhook.objects.filter(channel_disc_id=66).delete()


def _persona_webhook(f: Fixture) -> Written:
    # The caller passes the persona as it reads it now; the entry dressed
    # under the old name must be gone, not served.
    return lambda: probes.persona_webhook(
        67, f.persona
    ), lambda: m.Persona.objects.filter(pk=f.persona.pk).update(name="renamed")


#: One write per model-fed layer (some layers have several kinds of entry).
CASES: dict[str, list[Case]] = {
    "tomori_state": [_tomori_state],
    "user": [_user, _blacklist],
    "channel_whitelist": [_whitelist, _whitelist_roles],
    "channel_llm": [_channel_llm],
    "channel_prompt": [_channel_prompt],
    "emoji_sticker": [_emoji_sticker],
    "persona_sprite": [_persona_sprite],
    "personal_spotlight": [_spotlight],
    "guild_mcp_config": [_mcp],
    "st_preset": [_st_preset],
    "novelai_subscription": [_novelai],
    "llm": [_llm],
    "preset_avatar": [_preset_avatar],
    "webhook": [_webhook, _persona_webhook],
}


def _model_fed_layers() -> set[str]:
    return {name for rule in rules.RULES for name in rule.caches}


def test_every_model_fed_layer_has_a_write_case():
    fed = _model_fed_layers()
    assert fed <= set(registry.names())
    assert set(CASES) == fed


CASE_PARAMS = [
    pytest.param(case, id=f"{layer}-{case.__name__.strip('_')}")
    for layer, cases in CASES.items()
    for case in cases
]


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_every_model_fed_layer_serves_the_write(
    case: Case, layers: Layers, world: World, commit, tmp_path: Path
):
    fixture = Fixture(world, tmp_path)
    make, write = case(fixture)
    read = make if isinstance(make, Probe) else make()
    every = [
        probes.state(fixture.server),
        probes.user_row(fixture.user),
        probes.blacklisted(fixture.server, fixture.user),
        probes.whitelist(fixture.server, 61),
        probes.expressions(fixture.server),
        probes.active_st_preset(fixture.server),
        probes.llm_row(fixture.llm),
        read,
    ]
    before = layers.warm(*every)[-1]

    with commit():
        write()

    read = make if isinstance(make, Probe) else make()
    after = layers.read(read)
    assert after != before, "the write did not change what the layer serves"
    assert after == layers.fresh(read)
    assert layers.stale(*every[:-1], read) == []


def test_mcp_display_metadata_only_save_invalidates_nothing(
    layers, world, commit, django_assert_num_queries
):
    server = world.server()
    mcp = m.GuildMcpServerConfig.objects.create(
        server=server, name="a", url="http://a", tool_names=["x"]
    )
    configs = probes.mcp_configs(server)
    layers.warm(configs)

    with capture() as seen, commit():
        mcp.display_metadata = {"icon": "new"}
        mcp.save(update_fields=["display_metadata"])
        mcp.tool_names = ["x"]  # the same snapshot again
        mcp.save()

    assert seen.recorded == []
    with django_assert_num_queries(0):
        layers.read(configs)  # still the cached entry

    with capture() as seen, commit():
        mcp.tool_names = ["x", "y"]
        mcp.save(update_fields=["tool_names", "tool_names_updated_at"])

    assert seen.dispatched == [Event("guild_mcp_config", "key", (server.id,))]
    assert [c.tool_names for c in layers.read(configs).configs] == [("x", "y")]


@pytest.mark.django_db(transaction=True)
def test_deleting_a_stale_instance_invalidates_where_the_row_is_now(layers, world):  # type: ignore[no-untyped-def]
    a, b = world.server(), world.server()
    persona = world.persona(a, name="ghost")
    stale = m.Persona.objects.get(pk=persona.pk)  # loaded while in server a
    m.Persona.objects.filter(pk=persona.pk).update(server=b)
    state = probes.state(b)
    assert "ghost" in names(layers.warm(state)[0])  # b's state lists the persona
    stale.delete()
    assert "ghost" not in names(layers.read(state))


@pytest.mark.parametrize("path", ["update", "bulk_update"])
def test_a_write_over_many_servers_looks_the_servers_up_in_one_query(
    layers, world, commit, path
):
    """The key (a server's Discord id) is read per batch, not once per row."""
    from django.test.utils import CaptureQueriesContext

    servers = [world.server() for _ in range(30)]
    personas = [world.persona(server, name="before") for server in servers]
    layers.warm(*(probes.state(server) for server in servers))

    with commit(), CaptureQueriesContext(connection) as queries:
        if path == "update":
            m.Persona.objects.filter(pk__in=[p.pk for p in personas]).update(
                name="after"
            )
        else:
            for persona in personas:
                persona.name = "after"
            m.Persona.objects.bulk_update(personas, ["name"])

    server_reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("SELECT") and 'FROM "servers"' in q["sql"]
    ]
    assert len(server_reads) == 1, server_reads
    for server in servers:
        assert names(layers.read(probes.state(server))) == ("main", "after")
