"""Every write path invalidates what it changed: read through a cache, write, read again."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import F

from caches.invalidation import Event, capture, raw_write, record_change
from tomori import models as m

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres")]


def test_save_invalidates_the_servers_tomori_state(caches, world, commit):
    server = world.server()
    persona = world.persona(server, name="before")
    old = caches.read("tomori_state", server.server_disc_id)

    with commit():
        persona.name = "after"
        persona.save()

    assert caches.read("tomori_state", server.server_disc_id) != old
    assert caches.stale() == []


def test_persona_moved_to_another_server_invalidates_both(caches, world, commit):
    first, second = world.server(), world.server()
    persona = world.persona(first)
    caches.read("tomori_state", first.server_disc_id)
    caches.read("tomori_state", second.server_disc_id)

    with commit():
        persona.server = second
        persona.save(update_fields=["server"])

    assert caches.stale() == []
    assert caches.read("tomori_state", second.server_disc_id)[4][0][0] == persona.id


def test_save_of_a_stale_instance_uses_the_stored_old_key(caches, world, commit):
    first, second, third = world.server(), world.server(), world.server()
    persona = world.persona(first)
    stale_copy = m.Persona.objects.get(pk=persona.pk)
    m.Persona.objects.filter(pk=persona.pk).update(server=second)
    caches.read("tomori_state", second.server_disc_id)

    with commit():
        stale_copy.server = third
        stale_copy.save()

    assert caches.stale() == []


def test_delete_invalidates(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    caches.read("tomori_state", server.server_disc_id)

    with commit():
        persona.delete()

    assert caches.read("tomori_state", server.server_disc_id)[4] == ()
    assert caches.stale() == []


def test_parent_delete_cascades_invalidate_every_child_cache(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    llm = world.llm()
    m.PersonaSprite.objects.create(
        persona=persona, name="smile", image_url="http://x/1"
    )
    m.ChannelLlmOverride.objects.create(server=server, channel_disc_id=7, llm=llm)
    m.ChannelPromptOverride.objects.create(server=server, channel_disc_id=7, prompt="p")
    m.GuildMcpServerConfig.objects.create(server=server, name="mcp", url="http://m")
    keys = [
        ("tomori_state", server.server_disc_id),
        ("persona_sprite", persona.id),
        ("channel_llm", (server.id, 7)),
        ("channel_prompt", (server.id, 7)),
        ("guild_mcp_config", server.id),
        ("emoji_sticker", server.id),
    ]
    for name, key in keys:
        caches.read(name, key)

    with commit():
        server.delete()

    assert caches.stale() == []
    assert all(
        caches.read(name, key) in (None, (), (None, (), None)) for name, key in keys
    )


def test_cascade_from_one_delete_is_one_batch(caches, world, commit, local_bus):
    server = world.server()
    for _ in range(5):
        persona = world.persona(server)
        m.PersonaSprite.objects.create(persona=persona, name="s", image_url="http://x")

    with commit() as callbacks:
        server.delete()

    assert len(callbacks) == 1
    assert local_bus.snapshot()["local"] == 1


def test_set_null_from_a_deleted_llm_invalidates_the_rows_it_rewrote(
    caches, world, commit
):
    server = world.server()
    llm = world.llm()
    world.persona(server, llm=llm)
    m.ServerModelConfig.objects.create(server=server, llm=llm)
    caches.read("tomori_state", server.server_disc_id)
    caches.read("llm", llm.id)

    with commit():
        llm.delete()

    assert caches.stale() == []


def test_queryset_update_invalidates_old_and_new_keys(caches, world, commit):
    first, second = world.server(), world.server()
    world.persona(first)
    world.persona(first)
    caches.read("tomori_state", first.server_disc_id)
    caches.read("tomori_state", second.server_disc_id)

    with commit():
        count = m.Persona.objects.filter(server=first).update(server=second)

    assert count == 2
    assert caches.stale() == []
    assert len(caches.read("tomori_state", second.server_disc_id)[4]) == 2


def test_queryset_update_with_an_expression(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    m.PersonaSprite.objects.create(persona=persona, name="s", image_url="http://x")
    caches.read("persona_sprite", persona.id)

    with commit():
        m.PersonaSprite.objects.filter(persona=persona).update(
            position=F("position") + 5
        )

    assert caches.read("persona_sprite", persona.id)[0][1] == 5
    assert caches.stale() == []


def test_queryset_update_of_an_irrelevant_column_records_nothing(world, commit):
    server = world.server()
    mcp = m.GuildMcpServerConfig.objects.create(server=server, name="a", url="http://a")

    with capture() as seen, commit():
        m.GuildMcpServerConfig.objects.filter(pk=mcp.pk).update(
            display_metadata={"icon": "x"}
        )

    assert seen.recorded == []


def test_queryset_delete_invalidates(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    m.PersonaSprite.objects.create(persona=persona, name="a", image_url="http://x/a")
    m.PersonaSprite.objects.create(persona=persona, name="b", image_url="http://x/b")
    caches.read("persona_sprite", persona.id)

    with commit():
        m.PersonaSprite.objects.filter(persona=persona, name="a").delete()

    assert caches.read("persona_sprite", persona.id) == (("b", 0, "http://x/b"),)
    assert caches.stale() == []


def test_bulk_create_invalidates(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    caches.read("persona_sprite", persona.id)
    caches.read("emoji_sticker", server.id)

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

    assert len(caches.read("persona_sprite", persona.id)) == 2
    assert caches.stale() == []


def test_bulk_create_without_primary_keys_drops_the_pk_keyed_caches(
    caches, world, commit
):
    server = world.server()
    preset = m.PresetPersona.objects.create(name="p1")
    caches.read("preset_avatar", preset.id)

    with capture() as seen, commit():
        m.PresetPersona.objects.bulk_create(
            [m.PresetPersona(name="p1"), m.PresetPersona(name="p2")],
            ignore_conflicts=True,
        )

    assert Event("preset_avatar", "all") in seen.dispatched
    assert caches.stale() == []
    assert server.pk


def test_bulk_create_upsert_that_moves_keys_drops_the_caches(caches, world, commit):
    server, other = world.server(), world.server()
    llm = world.llm()
    m.ChannelLlmOverride.objects.create(server=server, channel_disc_id=9, llm=llm)
    caches.read("channel_llm", (server.id, 9))
    replacement = world.llm()

    with commit():
        m.ChannelLlmOverride.objects.bulk_create(
            [m.ChannelLlmOverride(server=server, channel_disc_id=9, llm=replacement)],
            update_conflicts=True,
            unique_fields=["server", "channel_disc_id"],
            update_fields=["llm"],
        )

    assert caches.read("channel_llm", (server.id, 9)) == replacement.id
    assert caches.stale() == []
    assert other.pk


def test_bulk_update_invalidates_old_and_new_keys(caches, world, commit):
    first, second = world.server(), world.server()
    personas = [world.persona(first), world.persona(first)]
    caches.read("tomori_state", first.server_disc_id)
    caches.read("tomori_state", second.server_disc_id)
    for persona in personas:
        persona.server = second
        persona.name = persona.name + "-moved"

    with commit():
        m.Persona.objects.bulk_update(personas, ["server", "name"], batch_size=1)

    assert caches.stale() == []
    assert caches.read("tomori_state", first.server_disc_id)[4] == ()


def test_update_or_create_and_get_or_create(caches, world, commit):
    server = world.server()
    caches.read("channel_prompt", (server.id, 11))

    with commit():
        m.ChannelPromptOverride.objects.update_or_create(
            server=server, channel_disc_id=11, defaults={"prompt": "first"}
        )
    assert caches.read("channel_prompt", (server.id, 11)) == ("first", "append")

    with commit():
        m.ChannelPromptOverride.objects.update_or_create(
            server=server, channel_disc_id=11, defaults={"prompt": "second"}
        )
    assert caches.read("channel_prompt", (server.id, 11)) == ("second", "append")

    caches.read("novelai_subscription", server.id)
    with commit():
        m.NovelAiSubscription.objects.get_or_create(
            server=server, defaults={"tier": "opus", "context_limit": 8192}
        )
    assert caches.read("novelai_subscription", server.id) == ("opus", 8192)
    assert caches.stale() == []


def _whitelist_key(server: m.Server, channel: int, parent: int = 0) -> str:
    return f"{server.server_disc_id}:{channel}:{parent}:0"


def test_m2m_add_remove_clear_forward(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=21)
    key = _whitelist_key(server, 21)
    thread_key = _whitelist_key(server, 99, parent=21)

    for change in (
        lambda: row.personas.add(persona),
        lambda: row.personas.remove(persona),
        lambda: row.personas.set([persona]),
        lambda: row.personas.clear(),
    ):
        caches.read("channel_whitelist", key)
        caches.read("channel_whitelist", thread_key)
        with commit():
            change()
        assert caches.stale() == []


def test_m2m_changes_from_the_persona_side(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    rows = [
        m.WhitelistedChannel.objects.create(server=server, channel_disc_id=c)
        for c in (31, 32)
    ]
    keys = [_whitelist_key(server, c) for c in (31, 32)]

    for change in (
        lambda: persona.whitelisted_channels.add(*rows),
        lambda: persona.whitelisted_channels.remove(rows[0]),
        lambda: persona.whitelisted_channels.clear(),
    ):
        for key in keys:
            caches.read("channel_whitelist", key)
        with commit():
            change()
        assert caches.stale() == []


def test_whitelist_row_moved_to_another_channel_invalidates_both(caches, world, commit):
    server = world.server()
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=41)
    caches.read("channel_whitelist", _whitelist_key(server, 41))
    caches.read("channel_whitelist", _whitelist_key(server, 42))
    caches.read("channel_whitelist", _whitelist_key(server, 43, parent=41))

    with commit():
        row.channel_disc_id = 42
        row.save()

    assert caches.stale() == []


def test_deleting_a_persona_invalidates_whitelist_restrictions(caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=51)
    row.personas.add(persona)
    caches.read("channel_whitelist", _whitelist_key(server, 51))

    with commit():
        persona.delete()

    assert caches.stale() == []


def test_raw_sql_write_declared_through_raw_write(caches, world, commit):
    server = world.server()
    persona = world.persona(server, name="raw-before")
    caches.read("tomori_state", server.server_disc_id)

    touched = Event("tomori_state", "key", (server.server_disc_id,))
    with commit(), raw_write(touched), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE personas SET name = %s WHERE id = %s", ["raw-after", persona.id]
        )

    assert caches.read("tomori_state", server.server_disc_id)[4][0][1] == "raw-after"
    assert caches.stale() == []


def test_raw_sql_write_declared_as_a_model_change(caches, world, commit):
    first, second = world.server(), world.server()
    persona = world.persona(first)
    caches.read("tomori_state", first.server_disc_id)
    caches.read("tomori_state", second.server_disc_id)

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

    assert caches.stale() == []


def test_raw_write_that_raises_records_nothing(caches, world, commit):
    server = world.server()

    touched = Event("tomori_state", "key", (server.server_disc_id,))
    with capture() as seen, commit(), pytest.raises(RuntimeError), raw_write(touched):
        raise RuntimeError("the SQL failed")

    assert seen.recorded == [] and seen.dispatched == []


def test_every_cache_fed_by_a_model_is_invalidated(caches, world, commit):
    server, user, llm = world.server(), world.user(), world.llm()
    persona = world.persona(server)
    preset = m.PresetPersona.objects.create(name="preset")
    st = m.StPreset.objects.create(server=server, name="st")
    reads = [
        ("user", user.user_disc_id),
        ("user", ("bl", server.server_disc_id, user.user_disc_id)),
        ("personal_spotlight", server.id),
        ("personal_spotlight", f"{server.id}:{user.id}:61"),
        ("st_preset", server.id),
        ("llm", llm.id),
        ("preset_avatar", preset.id),
        ("webhook", 61),
        ("webhook", f"61:{persona.id}"),
        ("emoji_sticker", server.id),
        ("channel_whitelist", _whitelist_key(server, 61)),
    ]
    writes = [
        lambda: m.User.objects.filter(pk=user.pk).update(language="fr"),
        lambda: m.UserBlacklist.objects.create(server=server, user=user),
        lambda: m.PersonalSpotlight.objects.create(
            server=server, user=user, channel_disc_id=61, persona=persona
        ),
        lambda: m.StPresetNode.objects.create(preset=st, content="hello"),
        lambda: m.Llm.objects.filter(pk=llm.pk).update(is_default=True),
        lambda: m.PresetPersona.objects.filter(pk=preset.pk).update(
            avatar_path="/a.png"
        ),
        lambda: m.ManagedWebhook.objects.create(
            server=server,
            channel_disc_id=61,
            webhook_disc_id=62,
            token_ciphertext="x",
            key_version=1,
        ),
        lambda: m.Persona.objects.filter(pk=persona.pk).update(avatar_url="http://a/b"),
        lambda: m.ServerExpressionSync.objects.create(server=server, emoji_count=3),
        lambda: m.Server.objects.filter(pk=server.pk).update(emoji_usage_enabled=False),
        lambda: m.WhitelistedRole.objects.create(server=server, role_disc_id=5),
        lambda: m.Server.objects.filter(pk=server.pk).update(
            channel_whitelist_enabled=True
        ),
    ]
    for write in writes:
        for name, key in reads:
            caches.read(name, key)
        with commit():
            write()
        assert caches.stale() == [], write


def test_mcp_display_metadata_only_save_invalidates_nothing(caches, world, commit):
    server = world.server()
    mcp = m.GuildMcpServerConfig.objects.create(
        server=server, name="a", url="http://a", tool_names=["x"]
    )
    cached = caches.read("guild_mcp_config", server.id)

    with capture() as seen, commit():
        mcp.display_metadata = {"icon": "new"}
        mcp.save(update_fields=["display_metadata"])
        mcp.tool_names = ["x"]  # the same snapshot again
        mcp.save()

    assert seen.recorded == []
    assert caches.cached("guild_mcp_config", server.id) is cached

    with capture() as seen, commit():
        mcp.tool_names = ["x", "y"]
        mcp.save(update_fields=["tool_names", "tool_names_updated_at"])

    assert seen.dispatched == [Event("guild_mcp_config", "key", (server.id,))]
    assert caches.stale() == []


@pytest.mark.django_db(transaction=True)
def test_deleting_a_stale_instance_invalidates_where_the_row_is_now(caches, world):  # type: ignore[no-untyped-def]
    a, b = world.server(), world.server()
    persona = world.persona(a, name="ghost")
    stale = m.Persona.objects.get(pk=persona.pk)  # loaded while in server a
    m.Persona.objects.filter(pk=persona.pk).update(server=b)
    caches.read("tomori_state", b.server_disc_id)  # b's state lists the persona
    stale.delete()
    assert caches.stale() == []
