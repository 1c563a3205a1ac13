"""Preset personas (with avatars) and ST presets with their nodes."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tomori.models.base import CacheFeedingModel
from tomori.models.servers import Server


class PresetPersona(CacheFeedingModel):
    """A ready-made persona offered to servers; its avatar is a PNG on disk."""

    name = models.CharField(max_length=80, unique=True)
    description = models.TextField(blank=True)
    avatar_path = models.CharField(
        max_length=500, blank=True, help_text="PNG file, absolute or under var/avatars/"
    )
    is_active = models.BooleanField(default=True)

    class Meta:
        db_table = "preset_personas"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class StPreset(CacheFeedingModel):
    """A SillyTavern-style prompt preset of a server; at most one active."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="st_presets"
    )
    name = models.CharField(max_length=100)
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
    role = models.CharField(max_length=20, default="system")
    content = models.TextField()
    enabled = models.BooleanField(default=True)

    class Meta:
        db_table = "st_preset_nodes"
        ordering = ["preset", "position", "id"]

    def __str__(self) -> str:
        return f"{self.preset} #{self.position}"
