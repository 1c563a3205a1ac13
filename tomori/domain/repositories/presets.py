"""Preset personas (avatars on disk) and ST presets with their nodes."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from tomori.domain.models import PresetPersona, StPreset, StPresetNode
from tomori.domain.repositories._fields import build, save_changes

PRESET_PERSONA_FIELDS = ("description", "avatar_path", "is_active")


@dataclass(frozen=True, slots=True)
class PresetPersonaRecord:
    """A preset persona row."""

    id: int
    name: str
    description: str
    avatar_path: str
    is_active: bool


@dataclass(frozen=True, slots=True)
class StPresetNodeRecord:
    """One ordered prompt block of an ST preset."""

    position: int
    role: str
    content: str
    enabled: bool


@dataclass(frozen=True, slots=True)
class StPresetRecord:
    """A server's active ST preset with its nodes in order."""

    id: int
    name: str
    nodes: tuple[StPresetNodeRecord, ...]


def _preset_record(row: PresetPersona) -> PresetPersonaRecord:
    return PresetPersonaRecord(
        id=row.pk,
        name=row.name,
        description=row.description,
        avatar_path=row.avatar_path,
        is_active=row.is_active,
    )


def list_preset_personas(
    *, active_only: bool = True
) -> tuple[PresetPersonaRecord, ...]:
    """Return the preset personas by name (only the active ones by default)."""
    rows = PresetPersona.objects.order_by("name")
    if active_only:
        rows = rows.filter(is_active=True)
    return tuple(_preset_record(row) for row in rows)


def get_preset_persona(preset_id: int) -> PresetPersonaRecord | None:
    """Return one preset persona, or None."""
    row = PresetPersona.objects.filter(pk=preset_id).first()
    return _preset_record(row) if row is not None else None


def get_active_st_preset(server_id: int) -> StPresetRecord | None:
    """Return the server's active ST preset with its nodes, or None."""
    return get_active_st_presets([server_id])[server_id]


def get_active_st_presets(
    server_ids: Collection[int],
) -> dict[int, StPresetRecord | None]:
    """Return each server's active ST preset with its nodes, or None (two queries)."""
    found: dict[int, StPresetRecord | None] = dict.fromkeys(server_ids)
    presets = {
        preset.pk: preset
        # At most one active preset per server (a constraint).
        for preset in StPreset.objects.filter(server_id__in=list(found), is_active=True)
    }
    nodes: dict[int, list[StPresetNodeRecord]] = {pk: [] for pk in presets}
    rows = StPresetNode.objects.filter(preset_id__in=list(presets)).order_by(
        "preset_id", "position", "id"
    )
    for n in rows:
        nodes[n.preset_id].append(
            StPresetNodeRecord(n.position, n.role, n.content, n.enabled)
        )
    for pk, preset in presets.items():
        found[preset.server_id] = StPresetRecord(
            id=pk, name=preset.name, nodes=tuple(nodes[pk])
        )
    return found


# Writes.


def preset_persona_create(*, name: str, **fields: Any) -> PresetPersonaRecord:
    """Create a preset persona."""
    row = build(PresetPersona, PRESET_PERSONA_FIELDS, fields, name=name)
    row.save()
    return _preset_record(row)


def preset_persona_update(*, preset_id: int, **fields: Any) -> PresetPersonaRecord:
    """Change a preset persona (description, avatar path, active flag)."""
    row = PresetPersona.objects.get(pk=preset_id)
    save_changes(row, PRESET_PERSONA_FIELDS, fields)
    return _preset_record(row)


def st_preset_create(
    *,
    server_id: int,
    name: str,
    nodes: Sequence[StPresetNodeRecord] = (),
    activate: bool = False,
) -> int:
    """Create an ST preset with its nodes (optionally making it active); return its id."""
    with transaction.atomic():
        if activate:
            _deactivate_all(server_id)
        preset = StPreset.objects.create(
            server_id=server_id, name=name, is_active=activate
        )
        for node in nodes:
            StPresetNode.objects.create(
                preset=preset,
                position=node.position,
                role=node.role,
                content=node.content,
                enabled=node.enabled,
            )
    return preset.pk


def st_preset_activate(*, preset_id: int) -> None:
    """Make this preset its server's only active one."""
    with transaction.atomic():
        preset = StPreset.objects.select_for_update().get(pk=preset_id)
        _deactivate_all(preset.server_id, keep=preset.pk)
        if not preset.is_active:
            preset.is_active = True
            preset.save(update_fields=["is_active", "updated_at"])


def st_preset_deactivate(*, server_id: int) -> None:
    """Leave the server with no active ST preset."""
    _deactivate_all(server_id)


def _deactivate_all(server_id: int, keep: int | None = None) -> None:
    for preset in StPreset.objects.filter(server_id=server_id, is_active=True):
        if preset.pk != keep:
            preset.is_active = False
            preset.save(update_fields=["is_active", "updated_at"])


def st_preset_node_update(*, preset_id: int, position: int, **fields: Any) -> None:
    """Change one node of a preset (role, content, enabled)."""
    node = StPresetNode.objects.get(preset_id=preset_id, position=position)
    save_changes(node, ("role", "content", "enabled"), fields)
