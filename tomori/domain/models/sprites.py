"""Persona sprites and the messages they were sent with."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Length
from django.db.models.lookups import GreaterThanOrEqual, LessThanOrEqual

from tomori.domain.models import validation as v
from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import (
    BoundedTextField,
    SingleLineField,
    SnowflakeField,
    snowflake_checks,
)
from tomori.domain.models.servers import Persona

SPRITE_INSTRUCTIONS_DB_MAX = 1000


class PersonaSprite(CacheFeedingModel):
    """An ordered sprite (expression image) of a persona."""

    persona = models.ForeignKey(
        Persona, on_delete=models.CASCADE, related_name="sprites"
    )
    name = SingleLineField(max_length=64)
    position = models.PositiveIntegerField(default=0)
    image_url = models.URLField(validators=[v.validate_single_line])
    instructions = BoundedTextField(max_length=SPRITE_INSTRUCTIONS_DB_MAX, blank=True)

    class Meta:
        db_table = "persona_sprites"
        ordering = ["persona", "position", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["persona", "name"], name="sprite_name_unique_per_persona"
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(
                    Length("instructions"), SPRITE_INSTRUCTIONS_DB_MAX
                ),
                name="sprite_instructions_max_1000",
            ),
            models.CheckConstraint(
                condition=GreaterThanOrEqual(Length("name"), 1),
                name="sprite_name_not_empty",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.persona}: {self.name}"


class PersonaSpriteMessage(models.Model):
    """Which sprite a sent webhook message carried; immutable once written."""

    message_disc_id = SnowflakeField(primary_key=True)
    persona = models.ForeignKey(Persona, on_delete=models.CASCADE, related_name="+")
    sprite_name = SingleLineField(max_length=64)
    channel_disc_id = SnowflakeField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "persona_sprite_messages"
        constraints = [
            models.CheckConstraint(
                condition=GreaterThanOrEqual(Length("sprite_name"), 1),
                name="sprite_message_name_not_empty",
            ),
            *snowflake_checks("sprite_message", "message_disc_id", "channel_disc_id"),
        ]

    def __str__(self) -> str:
        return f"message {self.message_disc_id}: {self.sprite_name}"
