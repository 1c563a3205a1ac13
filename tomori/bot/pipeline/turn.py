"""What the pipeline resolved for one message: its outcome and the turn's inputs."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from caches.core.frozen import unfrozen_twin
from tomori.repositories.channels import (
    ChannelPromptRecord,
    CooldownOverride,
    WhitelistDecision,
)
from tomori.repositories.servers import PersonaRecord
from tomori.repositories.sprites import SpriteMessageRecord, SpriteRecord
from tomori.repositories.users import UserRecord

if TYPE_CHECKING:
    from caches.layers.tomori_state import TomoriState
    from tomori.bot.pipeline.history import HistoryContext
    from tomori.bot.pipeline.memory import MemoryRead
    from tomori.bot.pipeline.resolve import ModelChoice, ServerExtras

T = TypeVar("T")


class Outcome(enum.StrEnum):
    """How a message from a non-bot author ended in the pipeline."""

    OK = "ok"  # a guild turn with everything resolved
    DM = "dm"  # a direct message: user state and user-scoped memory only
    NOT_CONFIGURED = "not_configured"  # no server row, personas or API key
    BLACKLISTED = "blacklisted"
    NOT_WHITELISTED = "not_whitelisted"
    # The database failed where the turn needed it, and no last good value
    # could answer: never reported as not_configured or blacklisted.
    DB_UNAVAILABLE = "db_unavailable"


@dataclass(frozen=True, slots=True)
class ResolvedTurn:
    """Everything the caches answered for one message (the LLM call is out of scope).

    Fields after `outcome` are filled as far as the pipeline got: a turn that
    stopped at the blacklist has no personas or model. `db_failures` names
    the layers whose database read failed during the turn (however they then
    answered), `stale_layers` those that answered with a last good value.
    """

    outcome: Outcome
    message_id: int
    channel_disc_id: int
    user_disc_id: int
    server_disc_id: int | None = None
    server_id: int | None = None
    parent_channel_disc_id: int | None = None
    mentions_bot: bool = False
    user_id: int | None = None  # internal id; None for a user with no row
    privacy_level: int | None = None
    persona_names: tuple[str, ...] = ()
    main_persona: str | None = None
    active_persona: str | None = None
    active_persona_id: int | None = None
    allowed_persona_ids: tuple[int, ...] = ()  # empty: every persona may answer
    whitelist_inherited: bool = False
    cooldown: CooldownOverride | None = None
    llm_id: int | None = None
    llm_provider: str | None = None
    llm_codename: str | None = None
    llm_from_channel_override: bool = False
    model_supports_tools: bool | None = None  # catalog first, then the llms row
    model_context_length: int | None = None
    prompt_override: str | None = None
    prompt_mode: str | None = None
    spotlight_persona_id: int | None = None
    sprite_names: tuple[str, ...] = ()
    history_size: int = 0
    sprite_records: tuple[SpriteMessageRecord, ...] = ()
    transcripts_found: int = 0
    tables_found: int = 0
    emoji_count: int = 0
    sticker_count: int = 0
    mcp_server_count: int = 0
    st_preset: str | None = None
    novelai_tier: str | None = None
    stm_entries_found: int = 0
    stm_user_turns: int | None = None  # turn count of the user entry read
    stm_server_turns: int | None = None  # turn count of the server entry read
    db_failures: tuple[str, ...] = ()
    stale_layers: tuple[str, ...] = ()


# Built through its mutable twin: one is made per turn (see caches.core.frozen).
_UnfrozenTurn = unfrozen_twin(ResolvedTurn)


def ok_turn(
    base: dict[str, Any],
    *,
    state: TomoriState,
    decision: WhitelistDecision,
    persona: PersonaRecord | None,
    spotlight: int | None,
    model: ModelChoice,
    prompt: ChannelPromptRecord | None,
    sprites: Sequence[SpriteRecord],
    user: UserRecord | None,
    privacy: int,
    extras: ServerExtras,
    history: HistoryContext,
    memory: MemoryRead,
) -> ResolvedTurn:
    """Return the OK turn of what a guild turn resolved (`base`: the message's ids).

    One call with every field named: no per-turn dicts of fields to merge.
    """
    llm, main = model.llm, state.main_persona
    turn = _UnfrozenTurn(
        Outcome.OK,
        **base,
        user_id=user.id if user is not None else None,
        privacy_level=privacy,
        persona_names=tuple([p.name for p in state.personas]),
        main_persona=main.name if main is not None else None,
        active_persona=persona.name if persona is not None else None,
        active_persona_id=persona.id if persona is not None else None,
        allowed_persona_ids=decision.persona_ids,
        whitelist_inherited=decision.inherited_from_parent,
        cooldown=decision.cooldown,
        spotlight_persona_id=spotlight,
        llm_id=llm.id if llm is not None else None,
        llm_provider=llm.provider if llm is not None else None,
        llm_codename=llm.codename if llm is not None else None,
        llm_from_channel_override=model.from_channel_override,
        model_supports_tools=model.supports_tools,
        model_context_length=model.context_length,
        prompt_override=prompt.prompt if prompt else None,
        prompt_mode=prompt.mode if prompt else None,
        sprite_names=tuple([s.name for s in sprites]) if sprites else (),
        emoji_count=extras.emoji_count,
        sticker_count=extras.sticker_count,
        mcp_server_count=extras.mcp_server_count,
        st_preset=extras.st_preset,
        novelai_tier=extras.novelai_tier,
        history_size=history.size,
        sprite_records=history.sprite_records,
        transcripts_found=history.transcripts_found,
        tables_found=history.tables_found,
        stm_entries_found=memory.found,
        stm_user_turns=memory.user_turns,
        stm_server_turns=memory.server_turns,
    )
    turn.__class__ = ResolvedTurn  # now frozen (see caches.core.frozen)
    return turn
