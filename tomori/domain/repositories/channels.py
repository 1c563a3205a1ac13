"""Per-channel configuration: whitelist, LLM and system prompt overrides."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

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
from tomori.domain.repositories._fields import grouped


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


@dataclass(frozen=True, slots=True)
class WhitelistedChannelRecord:
    """A whitelisted channel's restrictions: its personas (empty: any) and cooldown."""

    persona_ids: tuple[int, ...]
    cooldown: CooldownOverride | None


@dataclass(frozen=True, slots=True)
class ServerWhitelist:
    """What every whitelist decision of one server is computed from.

    `known` False: no server row (every decision is UNKNOWN_SERVER_DECISION).
    `channels` holds the whitelisted channels (rows exist whether or not the
    whitelist is enabled); `allowed_roles` empty: no role whitelist.
    """

    known: bool
    enabled: bool
    channels: Mapping[int, WhitelistedChannelRecord]
    allowed_roles: frozenset[int]

    def decide(
        self,
        channel_disc_id: int,
        parent_disc_id: int | None,
        role_ids: Collection[int] | None,
    ) -> WhitelistDecision:
        """Decide the channel (or its parent, for a thread) and the member's roles."""
        if not self.known:
            return UNKNOWN_SERVER_DECISION
        row = self.channels.get(channel_disc_id)
        inherited = False
        if row is None and parent_disc_id is not None:
            row = self.channels.get(parent_disc_id)
            inherited = row is not None
        return WhitelistDecision(
            server_known=True,
            whitelist_enabled=self.enabled,
            channel_allowed=not self.enabled or row is not None,
            role_allowed=_role_allowed(self.allowed_roles, role_ids),
            inherited_from_parent=inherited,
            persona_ids=row.persona_ids if row is not None else (),
            cooldown=row.cooldown if row is not None else None,
            restricts_by_role=bool(self.allowed_roles),
        )


#: The channels of a server that whitelists none (shared: most servers).
_NO_CHANNELS: Mapping[int, WhitelistedChannelRecord] = MappingProxyType({})

UNKNOWN_SERVER_WHITELIST = ServerWhitelist(
    known=False, enabled=False, channels=_NO_CHANNELS, allowed_roles=frozenset()
)


def load_whitelist_decision(
    *,
    server_disc_id: int,
    channel_disc_id: int,
    parent_disc_id: int | None,
    role_ids: Collection[int] | None,
) -> WhitelistDecision:
    """Decide the channel (or its parent, for a thread) and the member's roles."""
    return load_server_whitelist(server_disc_id).decide(
        channel_disc_id, parent_disc_id, role_ids
    )


def load_server_whitelist(server_disc_id: int) -> ServerWhitelist:
    """Return what the server's whitelist decisions are computed from."""
    return load_server_whitelists([server_disc_id])[server_disc_id]


def load_server_whitelists(
    server_disc_ids: Collection[int],
) -> dict[int, ServerWhitelist]:
    """Return each server's whitelist, in 3 or 4 queries for all of them.

    Every id asked is answered (UNKNOWN_SERVER_WHITELIST without a server row).
    """
    return _whitelists(server_disc_ids, _server_flags(server_disc_ids))


def _server_flags(server_disc_ids: Collection[int]) -> dict[int, tuple[int, bool]]:
    """Return {server_disc_id: (server_id, whitelist enabled)} of the known servers."""
    rows = Server.objects.filter(server_disc_id__in=list(server_disc_ids)).values_list(
        "server_disc_id", "pk", "channel_whitelist_enabled"
    )
    return {disc_id: (pk, flag) for disc_id, pk, flag in rows}


def _whitelists(
    server_disc_ids: Collection[int], flags: dict[int, tuple[int, bool]]
) -> dict[int, ServerWhitelist]:
    server_ids = [pk for pk, _ in flags.values()]
    channels = _whitelisted_channels(server_ids)
    roles: dict[int, set[int]] = {server_id: set() for server_id in server_ids}
    rows = WhitelistedRole.objects.filter(server_id__in=server_ids).values_list(
        "server_id", "role_disc_id"
    )
    for server_id, role_disc_id in rows:
        roles[server_id].add(role_disc_id)
    found = dict.fromkeys(server_disc_ids, UNKNOWN_SERVER_WHITELIST)
    for disc_id, (pk, enabled) in flags.items():
        found[disc_id] = ServerWhitelist(
            known=True,
            enabled=enabled,
            channels=channels.get(pk, _NO_CHANNELS),
            allowed_roles=frozenset(roles[pk]),
        )
    return found


def _whitelisted_channels(
    server_ids: Collection[int],
) -> dict[int, dict[int, WhitelistedChannelRecord]]:
    """Return {server_id: {channel_disc_id: its record}} (two queries, one if none)."""
    rows = WhitelistedChannel.objects.filter(server_id__in=list(server_ids))
    found: dict[int, dict[int, WhitelistedChannelRecord]] = {}
    for row in rows.prefetch_related("personas"):
        cooldown = None
        if row.cooldown_type != CooldownType.NONE:
            cooldown = CooldownOverride(row.cooldown_type, row.cooldown_seconds)
        personas = tuple(sorted(p.pk for p in row.personas.all()))
        found.setdefault(row.server_id, {})[row.channel_disc_id] = (
            WhitelistedChannelRecord(personas, cooldown)
        )
    return found


def _role_allowed(
    allowed: frozenset[int], role_ids: Collection[int] | None
) -> bool | None:
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


def channels_with_llm_override(
    server_ids: Collection[int],
) -> dict[int, frozenset[int]]:
    """Return {server_id: the channels with an LLM override} for every server asked."""
    return _channels_by_server(ChannelLlmOverride, server_ids)


def channels_with_prompt_override(
    server_ids: Collection[int],
) -> dict[int, frozenset[int]]:
    """Return {server_id: the channels with a prompt override} for every server asked."""
    return _channels_by_server(ChannelPromptOverride, server_ids)


def _channels_by_server(
    model: type[ChannelLlmOverride | ChannelPromptOverride],
    server_ids: Collection[int],
) -> dict[int, frozenset[int]]:
    rows = model.objects.filter(server_id__in=list(server_ids)).values_list(
        "server_id", "channel_disc_id"
    )
    found = grouped(server_ids, rows, lambda row: row[0], lambda row: row[1])
    return {server_id: frozenset(channels) for server_id, channels in found.items()}


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
