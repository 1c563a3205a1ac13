"""From an event loop: repository writes reach the layers through commit-time invalidation.

These run the layers as the bot does (async, database calls in Django's
thread) with real commits, so the signal wiring of `caches.invalidation`
turns each repository write into the layer's invalidation op.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from caches.layers.channel_prompt import get_cached_channel_prompt
from caches.layers.channel_whitelist import get_cached_whitelist_status
from caches.layers.emoji_sticker import GuildExpressions, load_emoji_sticker_cache
from caches.layers.llm import ensure_llm_cache, get_cached_llm, initialize_llm_cache
from caches.layers.persona_sprite import get_cached_persona_sprites
from caches.layers.personal_spotlight import get_cached_personal_spotlight_status
from caches.layers.tomori_state import get_cached_all_personas
from caches.layers.user import get_cached_blacklist_status, get_cached_privacy_level
from tests.caches.layers.conftest import next_disc_id
from tomori.domain.models import PrivacyLevel
from tomori.domain.repositories import channels as channels_repo
from tomori.domain.repositories import expressions as expressions_repo
from tomori.domain.repositories import llms as llms_repo
from tomori.domain.repositories import servers as servers_repo
from tomori.domain.repositories import spotlight as spotlight_repo
from tomori.domain.repositories import sprites as sprites_repo
from tomori.domain.repositories import users as users_repo
from tomori.domain.repositories.expressions import GuildExpression
from tomori.domain.repositories.sprites import SpriteInput

pytestmark = pytest.mark.django_db(transaction=True)


async def db(fn: Any, **kwargs: Any) -> Any:
    return await sync_to_async(fn)(**kwargs)


async def configured_server() -> Any:
    server = await db(servers_repo.server_create, server_disc_id=next_disc_id())
    await db(
        servers_repo.persona_create, server_id=server.id, name="Tomori", is_main=True
    )
    return server


async def test_new_persona_shows_up_after_commit():
    server = await configured_server()
    assert len(await get_cached_all_personas(server.server_disc_id)) == 1
    await db(servers_repo.persona_create, server_id=server.id, name="Alter")
    names = [p.name for p in await get_cached_all_personas(server.server_disc_id)]
    assert names == ["Tomori", "Alter"]


async def test_privacy_and_blacklist_writes_show_up():
    server = await configured_server()
    user = await db(users_repo.user_create, user_disc_id=next_disc_id())
    assert await get_cached_privacy_level(user.user_disc_id) == PrivacyLevel.STANDARD
    assert not await get_cached_blacklist_status(
        server.server_disc_id, user.user_disc_id
    )
    await db(users_repo.user_update, user_id=user.id, privacy_level=PrivacyLevel.OPEN)
    await db(users_repo.user_blacklist_add, server_id=server.id, user_id=user.id)
    assert await get_cached_privacy_level(user.user_disc_id) == PrivacyLevel.OPEN
    assert await get_cached_blacklist_status(server.server_disc_id, user.user_disc_id)


async def test_whitelist_persona_restriction_shows_up_in_threads():
    server = await configured_server()
    persona = (await get_cached_all_personas(server.server_disc_id))[0]
    await db(
        channels_repo.whitelist_channel_add, server_id=server.id, channel_disc_id=7
    )
    thread = await get_cached_whitelist_status(
        server.server_disc_id, 8, parent_disc_id=7, role_ids=[]
    )
    assert thread.persona_ids == ()
    await db(
        channels_repo.whitelist_channel_set_personas,
        server_id=server.id,
        channel_disc_id=7,
        persona_ids=[persona.id],
    )
    thread = await get_cached_whitelist_status(
        server.server_disc_id, 8, parent_disc_id=7, role_ids=[]
    )
    assert thread.persona_ids == (persona.id,)


async def test_channel_prompt_write_shows_up():
    server = await configured_server()
    assert await get_cached_channel_prompt(server.id, 7) is None
    await db(
        channels_repo.channel_prompt_override_set,
        server_id=server.id,
        channel_disc_id=7,
        prompt="Speak like a pirate.",
    )
    assert (
        await get_cached_channel_prompt(server.id, 7)
    ).prompt == "Speak like a pirate."


async def test_first_spotlight_opens_the_gate():
    server = await configured_server()
    persona = (await get_cached_all_personas(server.server_disc_id))[0]
    user = await db(users_repo.user_create, user_disc_id=next_disc_id())
    assert await get_cached_personal_spotlight_status(server.id, user.id, 7) is None
    await db(
        spotlight_repo.personal_spotlight_set,
        server_id=server.id,
        user_id=user.id,
        channel_disc_id=7,
        persona_id=persona.id,
    )
    found = await get_cached_personal_spotlight_status(server.id, user.id, 7)
    assert found is not None and found.persona_id == persona.id


async def test_sprite_write_shows_up():
    server = await configured_server()
    persona = (await get_cached_all_personas(server.server_disc_id))[0]
    assert await get_cached_persona_sprites(persona.id) == ()
    await db(
        sprites_repo.persona_sprite_add,
        persona_id=persona.id,
        sprite=SpriteInput(name="wink", image_url="https://img.example/wink.png"),
    )
    assert [s.name for s in await get_cached_persona_sprites(persona.id)] == ["wink"]


async def test_llm_row_change_rewarms_on_ensure():
    row = await db(llms_repo.llm_create, provider="google", codename="gemini-2.5-pro")
    await initialize_llm_cache()
    await db(llms_repo.llm_update, llm_id=row.id, display_name="Gemini Pro")
    await ensure_llm_cache()
    assert get_cached_llm(row.id).display_name == "Gemini Pro"


async def test_emoji_sync_then_load_is_cached(monkeypatch):
    server = await configured_server()
    guild = GuildExpressions(emojis=[GuildExpression(1, "wave")], stickers=[])
    loads = 0
    real = expressions_repo.load_stored_expressions

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal loads
        loads += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(expressions_repo, "load_stored_expressions", counted)
    first = await load_emoji_sticker_cache(server.id, guild=guild)
    again = await load_emoji_sticker_cache(server.id, guild=guild)
    assert [e.name for e in first.emojis] == ["wave"]
    assert again is first and loads == 1
