"""Persona sprite layer and the repository's sprite limits."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from caches.layers import persona_sprite
from caches.layers.persona_sprite import (
    get_cached_persona_sprite,
    get_cached_persona_sprites,
    get_cached_prompt_sprites,
)
from caches.registry import registry
from tomori.domain.repositories import sprites as sprites_repo
from tomori.domain.repositories.sprites import SpriteInput, SpriteLimitError

pytestmark = pytest.mark.django_db

TTL = 10 * 60.0


def sprite(name: str, instructions: str = "") -> SpriteInput:
    return SpriteInput(
        name=name,
        image_url=f"https://img.example/{name}.png",
        instructions=instructions,
    )


def test_sprites_are_ordered_and_cached(run, persona, django_assert_num_queries):
    sprites_repo.persona_sprite_replace(
        persona_id=persona.id, sprites=[sprite("happy"), sprite("sad"), sprite("angry")]
    )
    names = [s.name for s in run(get_cached_persona_sprites, persona.id)]
    assert names == ["happy", "sad", "angry"]
    with django_assert_num_queries(0):
        assert run(get_cached_persona_sprite, persona.id, "sad").name == "sad"
        assert run(get_cached_persona_sprite, persona.id, "missing") is None


def test_empty_list_is_cached(run, persona, django_assert_num_queries):
    assert run(get_cached_persona_sprites, persona.id) == ()
    with django_assert_num_queries(0):
        assert run(get_cached_persona_sprites, persona.id) == ()


def test_sprites_expire(run, persona, count_calls, clock):
    loads = count_calls(sprites_repo, "list_persona_sprites")
    run(get_cached_persona_sprites, persona.id)
    clock.advance(TTL + 1)
    run(get_cached_persona_sprites, persona.id)
    assert loads.calls == 2


def test_key_op_shows_new_sprites(run, persona):
    run(get_cached_persona_sprites, persona.id)
    sprites_repo.persona_sprite_add(persona_id=persona.id, sprite=sprite("new"))
    assert registry.apply("persona_sprite", "key", persona.id) == 1
    assert [s.name for s in run(get_cached_persona_sprites, persona.id)] == ["new"]


def test_database_error_propagates_and_caches_nothing(run, persona, db_down):
    db_down(sprites_repo, "list_persona_sprites")
    with pytest.raises(OperationalError):
        run(get_cached_persona_sprites, persona.id)
    assert len(persona_sprite._layer.cache) == 0


def test_prompt_sprites_are_capped(run, persona, settings):
    settings.PERSONA_SPRITE_PROMPT_MAX_COUNT = 2
    sprites_repo.persona_sprite_replace(
        persona_id=persona.id, sprites=[sprite(f"s{i}") for i in range(4)]
    )
    assert [s.name for s in run(get_cached_prompt_sprites, persona.id)] == ["s0", "s1"]


def test_repository_caps_sprites_per_persona(persona, settings):
    settings.PERSONA_SPRITE_MAX_PER_PERSONA = 2
    sprites_repo.persona_sprite_add(persona_id=persona.id, sprite=sprite("a"))
    sprites_repo.persona_sprite_add(persona_id=persona.id, sprite=sprite("b"))
    with pytest.raises(SpriteLimitError):
        sprites_repo.persona_sprite_add(persona_id=persona.id, sprite=sprite("c"))
    with pytest.raises(SpriteLimitError):
        sprites_repo.persona_sprite_replace(
            persona_id=persona.id, sprites=[sprite("x"), sprite("y"), sprite("z")]
        )
    assert len(sprites_repo.list_persona_sprites(persona.id)) == 2


def test_repository_limits_instructions_length(persona, settings):
    settings.PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH = 10
    sprites_repo.persona_sprite_add(
        persona_id=persona.id, sprite=sprite("ok", "x" * 10)
    )
    with pytest.raises(SpriteLimitError):
        sprites_repo.persona_sprite_add(
            persona_id=persona.id, sprite=sprite("no", "x" * 11)
        )


def test_instructions_limit_never_exceeds_the_database_maximum(settings):
    settings.PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH = 5000
    assert sprites_repo.max_instructions_length() == 1000
