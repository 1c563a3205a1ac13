"""Persona sprite cache (spec 15): a persona's ordered sprites, keyed by persona_id.

An empty list is cached too (most personas have no sprites). The limits
(sprites per persona, instructions length, sprites per prompt) are enforced by
`tomori.domain.repositories.sprites`, which the writes go through.
"""

from __future__ import annotations

from typing import Any

from caches.core import MISSING
from caches.layers._feeds import Feed
from caches.layers._maps import OneMap
from caches.layers._support import cached, parse_int, run_db, warm_map
from caches.layers.declaration import (
    GuildBatch,
    KeyShape,
    Layer,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from tomori.domain.repositories import population
from tomori.domain.repositories import sprites as sprites_repo
from tomori.domain.repositories.sprites import SpriteRecord

NAME = "persona_sprite"

CAP_SETTING = "PERSONA_SPRITE_CACHE_MAX_ENTRIES"
TTL_SETTING = "PERSONA_SPRITE_CACHE_TTL_MINUTES"

_layer: OneMap[int, Any] = OneMap(NAME, cap=CAP_SETTING, ttl=TTL_SETTING)


async def get_cached_persona_sprites(persona_id: int) -> tuple[SpriteRecord, ...]:
    """Return the persona's sprites in order, loading them on a miss."""
    sprites = cached(_layer.cache, persona_id)  # the hit path builds no closure
    if sprites is not MISSING:
        return sprites  # type: ignore[no-any-return]
    return await _layer.cache.get_or_load(  # type: ignore[no-any-return]
        persona_id, lambda: run_db(sprites_repo.list_persona_sprites, persona_id)
    )


async def get_cached_prompt_sprites(persona_id: int) -> tuple[SpriteRecord, ...]:
    """Return the sprites a prompt may list (at most PERSONA_SPRITE_PROMPT_MAX_COUNT)."""
    return sprites_repo.sprites_for_prompt(await get_cached_persona_sprites(persona_id))


async def get_cached_persona_sprite(persona_id: int, name: str) -> SpriteRecord | None:
    """Return the persona's sprite called `name` (render modifiers), or None."""
    for sprite in await get_cached_persona_sprites(persona_id):
        if sprite.name == name:
            return sprite
    return None


async def _warm(batch: GuildBatch) -> int:
    """Warm the sprites of a batch of servers' personas (two queries); return how many."""
    persona_ids = await run_db(sprites_repo.personas_of_servers, batch.server_ids)
    return await warm_map(
        _layer.cache, persona_ids, sprites_repo.list_persona_sprites_of
    )


def invalidate_persona_sprite_cache(persona_id: int) -> int:
    """Drop the persona's sprites; return entries removed."""
    return _layer.cache.invalidate(persona_id)


LAYER = Layer(
    name=NAME,
    description="Ordered sprites per persona (an empty list is cached).",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="persona_id",
        parse=parse_int,
        phrase=lambda p: f"sprites of persona #{p}",
    ),
    feeds=(Feed("tomori.PersonaSprite", "key", ("persona_id",)),),
    build=_layer.build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec("personas", population.personas),
    reload=lambda key: run_db(sprites_repo.list_persona_sprites, key),
    warm=_warm,
)
