"""Per-channel configuration: whitelist, LLM and system prompt overrides."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from django.db import transaction

from tomori.domain.models import (
    ChannelLlmOverride,
    ChannelPromptOverride,
    CooldownType,
    PromptMode,
    Server,
    WhitelistedChannel,
    WhitelistedRole,
)


@dataclass(frozen=True, slots=True)
class CooldownOverride:
    """A whitelisted channel's cooldown: per channel or per user, in seconds."""

    cooldown_type: str
    seconds: int


@dataclass(frozen=True, slots=True)
class WhitelistDecision:
    """Whether the bot may answer in a channel, and under which restrictions.

    `role_allowed` is None when the server restricts by role but the caller did
    not know the member's roles; it must look them up and ask again.
    `persona_ids` empty means every persona may answer. `restricts_by_role`
    False means the answer is the same for every member (the server keeps no
    role whitelist), so one cached answer serves every role set.
    """

    server_known: bool
    whitelist_enabled: bool
    channel_allowed: bool
    role_allowed: bool | None
    inherited_from_parent: bool
    persona_ids: tuple[int, ...]
    cooldown: CooldownOverride | None
    restricts_by_role: bool

    @property
    def allowed(self) -> bool | None:
        """Return the combined decision (None while the roles are unknown)."""
        if not self.channel_allowed:
            return False
        return self.role_allowed


@dataclass(frozen=True, slots=True)
class ChannelPromptRecord:
    """A channel's system prompt override and how it combines with the persona's."""

    prompt: str
    mode: str


UNKNOWN_SERVER_DECISION = WhitelistDecision(
    server_known=False,
    whitelist_enabled=False,
    channel_allowed=True,
    role_allowed=True,
    inherited_from_parent=False,
    persona_ids=(),
    cooldown=None,
    restricts_by_role=False,
)


def load_whitelist_decision(
    *,
    server_disc_id: int,
    channel_disc_id: int,
    parent_disc_id: int | None,
    role_ids: Collection[int] | None,
) -> WhitelistDecision:
    """Decide the channel (or its parent, for a thread) and the member's roles."""
    server = Server.objects.filter(server_disc_id=server_disc_id).first()
    if server is None:
        return UNKNOWN_SERVER_DECISION
    row, inherited = _whitelisted_row(server.pk, channel_disc_id, parent_disc_id)
    cooldown = None
    if row is not None and row.cooldown_type != CooldownType.NONE:
        cooldown = CooldownOverride(row.cooldown_type, row.cooldown_seconds)
    allowed_roles = _allowed_roles(server.pk)
    return WhitelistDecision(
        server_known=True,
        whitelist_enabled=server.channel_whitelist_enabled,
        channel_allowed=not server.channel_whitelist_enabled or row is not None,
        role_allowed=_role_allowed(allowed_roles, role_ids),
        inherited_from_parent=inherited,
        persona_ids=tuple(sorted(p.pk for p in row.personas.all())) if row else (),
        cooldown=cooldown,
        restricts_by_role=bool(allowed_roles),
    )


def _whitelisted_row(
    server_id: int, channel_disc_id: int, parent_disc_id: int | None
) -> tuple[WhitelistedChannel | None, bool]:
    ids = (
        [channel_disc_id]
        if parent_disc_id is None
        else [channel_disc_id, parent_disc_id]
    )
    rows = {
        row.channel_disc_id: row
        for row in WhitelistedChannel.objects.filter(
            server_id=server_id, channel_disc_id__in=ids
        ).prefetch_related("personas")
    }
    if channel_disc_id in rows:
        return rows[channel_disc_id], False
    if parent_disc_id is not None and parent_disc_id in rows:
        return rows[parent_disc_id], True
    return None, False


def _allowed_roles(server_id: int) -> set[int]:
    return set(
        WhitelistedRole.objects.filter(server_id=server_id).values_list(
            "role_disc_id", flat=True
        )
    )


def _role_allowed(allowed: set[int], role_ids: Collection[int] | None) -> bool | None:
    if not allowed:
        return True  # the server does not restrict by role
    if role_ids is None:
        return None
    return not allowed.isdisjoint(role_ids)


def get_channel_llm_overrides(
    *, server_id: int, channel_disc_ids: Iterable[int]
) -> dict[int, int]:
    """Return {channel_disc_id: llm_id} for the channels that have an override."""
    return dict(
        ChannelLlmOverride.objects.filter(
            server_id=server_id, channel_disc_id__in=list(channel_disc_ids)
        ).values_list("channel_disc_id", "llm_id")
    )


def get_channel_prompt_override(
    *, server_id: int, channel_disc_id: int
) -> ChannelPromptRecord | None:
    """Return the channel's system prompt override, or None."""
    row = (
        ChannelPromptOverride.objects.filter(
            server_id=server_id, channel_disc_id=channel_disc_id
        )
        .values_list("prompt", "mode")
        .first()
    )
    return ChannelPromptRecord(prompt=row[0], mode=row[1]) if row else None


# Writes. Each goes through the model so invalidation follows on commit.


def whitelist_channel_add(
    *,
    server_id: int,
    channel_disc_id: int,
    persona_ids: Iterable[int] = (),
    cooldown_type: str = CooldownType.NONE,
    cooldown_seconds: int = 0,
) -> int:
    """Whitelist a channel (with persona restrictions and a cooldown); return its id."""
    with transaction.atomic():
        row = WhitelistedChannel.objects.create(
            server_id=server_id,
            channel_disc_id=channel_disc_id,
            cooldown_type=cooldown_type,
            cooldown_seconds=cooldown_seconds,
        )
        persona_list = list(persona_ids)
        if persona_list:
            row.personas.set(persona_list)
    return row.pk


def whitelist_channel_update(
    *, server_id: int, channel_disc_id: int, cooldown_type: str, cooldown_seconds: int
) -> None:
    """Change a whitelisted channel's cooldown override."""
    row = WhitelistedChannel.objects.get(
        server_id=server_id, channel_disc_id=channel_disc_id
    )
    row.cooldown_type = cooldown_type
    row.cooldown_seconds = cooldown_seconds
    row.save(update_fields=["cooldown_type", "cooldown_seconds"])


def whitelist_channel_set_personas(
    *, server_id: int, channel_disc_id: int, persona_ids: Iterable[int]
) -> None:
    """Restrict a whitelisted channel to these personas (empty: no restriction)."""
    row = WhitelistedChannel.objects.get(
        server_id=server_id, channel_disc_id=channel_disc_id
    )
    row.personas.set(list(persona_ids))


def whitelist_channel_remove(*, server_id: int, channel_disc_id: int) -> bool:
    """Remove a channel from the whitelist; return whether it was there."""
    return _delete_one(
        WhitelistedChannel.objects.filter(
            server_id=server_id, channel_disc_id=channel_disc_id
        ).first()
    )


def whitelist_role_add(*, server_id: int, role_disc_id: int) -> bool:
    """Whitelist a role; return whether a row was created."""
    _, created = WhitelistedRole.objects.get_or_create(
        server_id=server_id, role_disc_id=role_disc_id
    )
    return created


def whitelist_role_remove(*, server_id: int, role_disc_id: int) -> bool:
    """Remove a role from the whitelist; return whether it was there."""
    return _delete_one(
        WhitelistedRole.objects.filter(
            server_id=server_id, role_disc_id=role_disc_id
        ).first()
    )


def channel_llm_override_set(
    *, server_id: int, channel_disc_id: int, llm_id: int
) -> None:
    """Make a channel use another LLM than the server's."""
    with transaction.atomic():
        row = (
            ChannelLlmOverride.objects.select_for_update()
            .filter(server_id=server_id, channel_disc_id=channel_disc_id)
            .first()
        ) or ChannelLlmOverride(server_id=server_id, channel_disc_id=channel_disc_id)
        row.llm_id = llm_id
        row.save()


def channel_llm_override_clear(*, server_id: int, channel_disc_id: int) -> bool:
    """Drop a channel's LLM override; return whether it had one."""
    return _delete_one(
        ChannelLlmOverride.objects.filter(
            server_id=server_id, channel_disc_id=channel_disc_id
        ).first()
    )


def channel_prompt_override_set(
    *,
    server_id: int,
    channel_disc_id: int,
    prompt: str,
    mode: str = PromptMode.APPEND,
) -> ChannelPromptRecord:
    """Set a channel's system prompt override (mode "append" or "replace")."""
    if mode not in PromptMode.values:
        raise ValueError(f"mode must be one of {PromptMode.values}, not {mode!r}")
    with transaction.atomic():
        row = (
            ChannelPromptOverride.objects.select_for_update()
            .filter(server_id=server_id, channel_disc_id=channel_disc_id)
            .first()
        ) or ChannelPromptOverride(server_id=server_id, channel_disc_id=channel_disc_id)
        row.prompt = prompt
        row.mode = mode
        row.save()
    return ChannelPromptRecord(prompt=prompt, mode=mode)


def channel_prompt_override_clear(*, server_id: int, channel_disc_id: int) -> bool:
    """Drop a channel's system prompt override; return whether it had one."""
    return _delete_one(
        ChannelPromptOverride.objects.filter(
            server_id=server_id, channel_disc_id=channel_disc_id
        ).first()
    )


def _delete_one(row: object | None) -> bool:
    if row is None:
        return False
    row.delete()  # type: ignore[attr-defined]
    return True
