"""Persona sprites (with the spec's limits) and the messages they were sent with."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Max

from tomori.domain.knobs import knobs
from tomori.domain.models import Persona, PersonaSprite, PersonaSpriteMessage
from tomori.domain.models.sprites import SPRITE_INSTRUCTIONS_DB_MAX
from tomori.domain.repositories._fields import grouped


class SpriteLimitError(ValueError):
    """A sprite write would break one of the persona sprite limits."""


@dataclass(frozen=True, slots=True)
class SpriteInput:
    """A sprite a caller wants stored."""

    name: str
    image_url: str
    instructions: str = ""


@dataclass(frozen=True, slots=True)
class SpriteRecord:
    """A stored persona sprite as the caches see it."""

    id: int
    persona_id: int
    name: str
    position: int
    image_url: str
    instructions: str


@dataclass(frozen=True, slots=True)
class SpriteMessageRecord:
    """Which sprite a sent webhook message carried."""

    message_disc_id: int
    persona_id: int
    sprite_name: str
    channel_disc_id: int


def max_sprites_per_persona() -> int:
    """Return PERSONA_SPRITE_MAX_PER_PERSONA."""
    return knobs().PERSONA_SPRITE_MAX_PER_PERSONA


def max_instructions_length() -> int:
    """Return the instructions limit, never above the database maximum (1000)."""
    return min(
        knobs().PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH, SPRITE_INSTRUCTIONS_DB_MAX
    )


def sprites_for_prompt(sprites: Sequence[SpriteRecord]) -> tuple[SpriteRecord, ...]:
    """Return the sprites a prompt may list (at most PERSONA_SPRITE_PROMPT_MAX_COUNT)."""
    return tuple(sprites[: knobs().PERSONA_SPRITE_PROMPT_MAX_COUNT])


def _record(row: PersonaSprite) -> SpriteRecord:
    return SpriteRecord(
        id=row.pk,
        persona_id=row.persona_id,
        name=row.name,
        position=row.position,
        image_url=row.image_url,
        instructions=row.instructions,
    )


def list_persona_sprites(persona_id: int) -> tuple[SpriteRecord, ...]:
    """Return a persona's sprites in order (position, then id)."""
    return list_persona_sprites_of([persona_id])[persona_id]


def list_persona_sprites_of(
    persona_ids: Collection[int],
) -> dict[int, tuple[SpriteRecord, ...]]:
    """Return each persona's sprites in order (position, then id) in one query."""
    rows = PersonaSprite.objects.filter(persona_id__in=list(persona_ids))
    return grouped(
        persona_ids,
        rows.order_by("persona_id", "position", "id"),
        lambda row: row.persona_id,
        _record,
    )


def personas_of_servers(server_ids: Collection[int]) -> list[int]:
    """Return the ids of the personas of these servers."""
    return list(
        Persona.objects.filter(server_id__in=list(server_ids))
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def _check_sprite(sprite: SpriteInput) -> None:
    limit = max_instructions_length()
    if len(sprite.instructions) > limit:
        raise SpriteLimitError(
            f"sprite {sprite.name!r}: instructions are {len(sprite.instructions)} "
            f"characters, the limit is {limit}"
        )
    if not sprite.name:
        raise SpriteLimitError("a sprite needs a name")


def _lock_persona(persona_id: int) -> None:
    # Serialises concurrent writers of one persona so the count check holds.
    Persona.objects.select_for_update().filter(pk=persona_id).values_list("pk").first()


def persona_sprite_add(*, persona_id: int, sprite: SpriteInput) -> SpriteRecord:
    """Append a sprite to a persona, enforcing the count and instructions limits."""
    _check_sprite(sprite)
    with transaction.atomic():
        _lock_persona(persona_id)
        existing = PersonaSprite.objects.filter(persona_id=persona_id)
        if existing.count() >= max_sprites_per_persona():
            raise SpriteLimitError(
                f"a persona may have at most {max_sprites_per_persona()} sprites"
            )
        last = existing.aggregate(last=Max("position"))["last"]
        row = PersonaSprite.objects.create(
            persona_id=persona_id,
            name=sprite.name,
            position=0 if last is None else last + 1,
            image_url=sprite.image_url,
            instructions=sprite.instructions,
        )
    return _record(row)


def persona_sprite_replace(
    *, persona_id: int, sprites: Sequence[SpriteInput]
) -> tuple[SpriteRecord, ...]:
    """Replace all of a persona's sprites with `sprites`, in that order."""
    if len(sprites) > max_sprites_per_persona():
        raise SpriteLimitError(
            f"a persona may have at most {max_sprites_per_persona()} sprites"
        )
    for sprite in sprites:
        _check_sprite(sprite)
    with transaction.atomic():
        _lock_persona(persona_id)
        PersonaSprite.objects.filter(persona_id=persona_id).delete()
        rows = [
            PersonaSprite.objects.create(
                persona_id=persona_id,
                name=s.name,
                position=i,
                image_url=s.image_url,
                instructions=s.instructions,
            )
            for i, s in enumerate(sprites)
        ]
    return tuple(_record(row) for row in rows)


def persona_sprite_delete(*, persona_id: int, name: str) -> bool:
    """Delete one sprite of a persona; return whether it existed."""
    row = PersonaSprite.objects.filter(persona_id=persona_id, name=name).first()
    if row is None:
        return False
    row.delete()
    return True


# Sprite messages: immutable rows, pruned by age on the write path.


def _message_record(row: PersonaSpriteMessage) -> SpriteMessageRecord:
    return SpriteMessageRecord(
        message_disc_id=row.message_disc_id,
        persona_id=row.persona_id,
        sprite_name=row.sprite_name,
        channel_disc_id=row.channel_disc_id,
    )


def get_sprite_messages(
    message_disc_ids: Iterable[int],
) -> dict[int, SpriteMessageRecord]:
    """Return the sprite mappings of these messages (one query), by message id."""
    ids = list(message_disc_ids)
    if not ids:
        return {}
    rows = PersonaSpriteMessage.objects.filter(message_disc_id__in=ids)
    return {row.message_disc_id: _message_record(row) for row in rows}


def sprite_message_create(
    *, message_disc_id: int, persona_id: int, sprite_name: str, channel_disc_id: int
) -> SpriteMessageRecord:
    """Store which sprite a sent message carried (idempotent per message)."""
    row, _ = PersonaSpriteMessage.objects.get_or_create(
        message_disc_id=message_disc_id,
        defaults={
            "persona_id": persona_id,
            "sprite_name": sprite_name,
            "channel_disc_id": channel_disc_id,
        },
    )
    return _message_record(row)


def prune_sprite_messages(*, older_than: datetime) -> int:
    """Delete sprite message rows created before `older_than`; return how many."""
    deleted, _ = PersonaSpriteMessage.objects.filter(created_at__lt=older_than).delete()
    return deleted
