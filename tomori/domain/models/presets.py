"""Preset personas (with avatars) and ST presets with their nodes."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tomori.domain.models import validation as v
from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import BoundedTextField, SingleLineField, length_checks
from tomori.domain.models.servers import Server


class PresetPersona(CacheFeedingModel):
    """A ready-made persona offered to servers; its avatar is a PNG on disk."""

    name = SingleLineField(max_length=v.PERSONA_NAME_MAX, unique=True)
    description = BoundedTextField(max_length=v.DESCRIPTION_MAX, blank=True)
    avatar_path = SingleLineField(
        max_length=500, blank=True, help_text="PNG file, absolute or under var/avatars/"
    )
    is_active = models.BooleanField(default=True)

    class Meta:
        db_table = "preset_personas"
        ordering = ["name"]
        constraints = length_checks("preset_persona", description=v.DESCRIPTION_MAX)

    def __str__(self) -> str:
        return self.name


class StPreset(CacheFeedingModel):
    """A SillyTavern-style prompt preset of a server; at most one active."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="st_presets"
    )
    name = SingleLineField(max_length=v.NAME_MAX)
    is_active = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "st_presets"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "name"], name="st_preset_name_unique"
            ),
            models.UniqueConstraint(
                fields=["server"],
                condition=Q(is_active=True),
                name="st_preset_one_active",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class StPresetNode(CacheFeedingModel):
    """One ordered prompt block of an ST preset."""

    preset = models.ForeignKey(StPreset, on_delete=models.CASCADE, related_name="nodes")
    position = models.PositiveIntegerField(default=0)
    role = SingleLineField(max_length=20, default="system")
    content = BoundedTextField(max_length=v.PROMPT_MAX)
    enabled = models.BooleanField(default=True)

    class Meta:
        db_table = "st_preset_nodes"
        ordering = ["preset", "position", "id"]
        constraints = length_checks("st_preset_node", content=v.PROMPT_MAX)

    def __str__(self) -> str:
        return f"{self.preset} #{self.position}"
