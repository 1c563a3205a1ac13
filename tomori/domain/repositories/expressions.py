"""Server emojis and stickers: the stored rows, the sync state and the sync itself."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from sys import intern

from django.db import transaction
from django.utils import timezone

from tomori.domain.models import (
    ExpressionKind,
    Server,
    ServerExpression,
    ServerExpressionSync,
)


@dataclass(frozen=True, slots=True)
class GuildExpression:
    """An emoji or sticker as the guild has it now (plain data from discord.py)."""

    disc_id: int
    name: str
    animated: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class ExpressionRecord:
    """A stored emoji or sticker as the caches see it."""

    expression_disc_id: int
    kind: str
    name: str
    animated: bool
    description: str


@dataclass(frozen=True, slots=True)
class ExpressionSyncState:
    """What the last sync of a server stored, and when."""

    emoji_count: int
    sticker_count: int
    last_synced_at: datetime | None


@dataclass(frozen=True, slots=True)
class StoredExpressions:
    """A server's enabled flags and the stored rows of its enabled categories.

    A category that is disabled is not loaded: its rows are None.
    """

    emoji_enabled: bool
    sticker_enabled: bool
    emojis: tuple[ExpressionRecord, ...] | None
    stickers: tuple[ExpressionRecord, ...] | None


def get_expression_sync_state(server_id: int) -> ExpressionSyncState | None:
    """Return the server's last sync state, or None if it was never synced."""
    row = (
        ServerExpressionSync.objects.filter(server_id=server_id)
        .values_list("emoji_count", "sticker_count", "last_synced_at")
        .first()
    )
    return ExpressionSyncState(*row) if row else None


def load_stored_expressions(
    server_id: int,
    *,
    emoji_enabled: bool | None = None,
    sticker_enabled: bool | None = None,
) -> StoredExpressions:
    """Load the rows of the enabled categories; flags left None come from the server."""
    if emoji_enabled is None or sticker_enabled is None:
        flags = (
            Server.objects.filter(pk=server_id)
            .values_list("emoji_usage_enabled", "sticker_usage_enabled")
            .first()
        ) or (False, False)
        emoji_enabled = flags[0] if emoji_enabled is None else emoji_enabled
        sticker_enabled = flags[1] if sticker_enabled is None else sticker_enabled
    return _stored({server_id: (emoji_enabled, sticker_enabled)})[server_id]


def load_stored_expressions_of(
    server_ids: Collection[int],
) -> dict[int, StoredExpressions]:
    """Load each known server's rows of its enabled categories (two queries).

    The flags are the server row's, as a turn passes them (its Tomori state's).
    """
    flags = Server.objects.filter(pk__in=list(server_ids)).values_list(
        "pk", "emoji_usage_enabled", "sticker_usage_enabled"
    )
    return _stored({pk: (emoji, sticker) for pk, emoji, sticker in flags})


def _stored(flags: dict[int, tuple[bool, bool]]) -> dict[int, StoredExpressions]:
    """Return each server's StoredExpressions from its flags (one query, or none)."""
    rows: dict[tuple[int, str], list[ExpressionRecord]] = {}
    for server_id, (emoji, sticker) in flags.items():
        for kind, on in _kinds(emoji, sticker):
            if on:
                rows[server_id, kind] = []
    if rows:
        wanted = ServerExpression.objects.filter(  # ordered: server, kind, name
            server_id__in={server_id for server_id, _ in rows},
            kind__in={kind for _, kind in rows},
        )
        for row in wanted:
            kept = rows.get((row.server_id, row.kind))
            if kept is not None:
                kept.append(_record(row))
    return {
        server_id: StoredExpressions(
            emoji_enabled=emoji,
            sticker_enabled=sticker,
            emojis=_rows_of(rows, server_id, ExpressionKind.EMOJI),
            stickers=_rows_of(rows, server_id, ExpressionKind.STICKER),
        )
        for server_id, (emoji, sticker) in flags.items()
    }


def _rows_of(
    rows: dict[tuple[int, str], list[ExpressionRecord]], server_id: int, kind: str
) -> tuple[ExpressionRecord, ...] | None:
    """Return a category's rows, None when it is disabled (not loaded)."""
    kept = rows.get((server_id, kind))
    return None if kept is None else tuple(kept)


def _kinds(emoji: bool, sticker: bool) -> list[tuple[str, bool]]:
    return [(ExpressionKind.EMOJI, emoji), (ExpressionKind.STICKER, sticker)]


def _record(row: ServerExpression) -> ExpressionRecord:
    return ExpressionRecord(
        expression_disc_id=row.expression_disc_id,
        kind=intern(row.kind),  # two distinct kinds across every cached row
        name=row.name,
        animated=row.animated,
        description=row.description,
    )


def sync_server_expressions(
    *,
    server_id: int,
    emojis: Sequence[GuildExpression],
    stickers: Sequence[GuildExpression],
) -> None:
    """Make the stored emojis and stickers of a server match the guild's."""
    with transaction.atomic():
        for kind, current in (
            (ExpressionKind.EMOJI, emojis),
            (ExpressionKind.STICKER, stickers),
        ):
            _sync_kind(server_id, kind, current)
        ServerExpressionSync.objects.update_or_create(
            server_id=server_id,
            defaults={
                "emoji_count": len(emojis),
                "sticker_count": len(stickers),
                "last_synced_at": timezone.now(),
            },
        )


def _sync_kind(server_id: int, kind: str, current: Sequence[GuildExpression]) -> None:
    wanted = {e.disc_id: _clip(e) for e in current}
    stored = {
        row.expression_disc_id: row
        for row in ServerExpression.objects.filter(server_id=server_id, kind=kind)
    }
    gone = [disc_id for disc_id in stored if disc_id not in wanted]
    if gone:
        ServerExpression.objects.filter(
            server_id=server_id, kind=kind, expression_disc_id__in=gone
        ).delete()
    changed = []
    for disc_id, row in stored.items():
        new = wanted.get(disc_id)
        if new is not None and _differs(row, new):
            row.name, row.animated, row.description = (
                new.name,
                new.animated,
                new.description,
            )
            changed.append(row)
    if changed:
        ServerExpression.objects.bulk_update(
            changed, ["name", "animated", "description"]
        )
    ServerExpression.objects.bulk_create(
        [_new_row(server_id, kind, e) for d, e in wanted.items() if d not in stored],
        ignore_conflicts=True,  # an id still stored under another server stays there
    )


def _clip(e: GuildExpression) -> GuildExpression:
    # Stored columns are bounded; compare and store the same clipped values.
    return GuildExpression(e.disc_id, e.name[:100], e.animated, e.description[:200])


def _differs(row: ServerExpression, new: GuildExpression) -> bool:
    return (row.name, row.animated, row.description) != (
        new.name,
        new.animated,
        new.description,
    )


def _new_row(server_id: int, kind: str, e: GuildExpression) -> ServerExpression:
    return ServerExpression(
        server_id=server_id,
        kind=kind,
        expression_disc_id=e.disc_id,
        name=e.name,
        animated=e.animated,
        description=e.description,
    )
