"""What the pipeline resolved for one message: its outcome and the turn's inputs."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from caches.core.frozen import unfrozen_twin
from tomori.domain.repositories.channels import (
    ChannelPromptRecord,
    CooldownOverride,
    WhitelistDecision,
)
from tomori.domain.repositories.servers import PersonaRecord
from tomori.domain.repositories.sprites import SpriteMessageRecord, SpriteRecord
from tomori.domain.repositories.users import UserRecord

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


def stop_turn(outcome: Outcome, base: dict[str, Any]) -> ResolvedTurn:
    """Return a turn that stopped at `outcome` with only the message's ids (`base`)."""
    turn: Any = _UnfrozenTurn(outcome, **base)
    turn.__class__ = ResolvedTurn  # now frozen (see caches.core.frozen)
    return turn  # type: ignore[no-any-return]


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
    privacy: int | None,
    extras: ServerExtras,
    history: HistoryContext,
    memory: MemoryRead,
) -> ResolvedTurn:
    """Return the OK turn of what a guild turn resolved (`base`: the message's ids).

    Every field is stored into a bare twin, by name: a 41-keyword call costs
    about 3 us in keyword matching alone (4 with `**base`), the stores about
    1.4. The turn equals one built with `ResolvedTurn(...)`, which the tests
    check field by field, so a field added to ResolvedTurn must be set here.
    """
    llm, main = model.llm, state.main_persona
    turn: Any = object.__new__(_UnfrozenTurn)
    turn.outcome = Outcome.OK
    turn.message_id = base["message_id"]
    turn.channel_disc_id = base["channel_disc_id"]
    turn.user_disc_id = base["user_disc_id"]
    turn.server_disc_id = base["server_disc_id"]
    turn.server_id = base["server_id"]
    turn.parent_channel_disc_id = base["parent_channel_disc_id"]
    turn.mentions_bot = base["mentions_bot"]
    turn.user_id = user.id if user is not None else None
    turn.privacy_level = privacy
    turn.persona_names = tuple([p.name for p in state.personas])
    turn.main_persona = main.name if main is not None else None
    turn.active_persona = persona.name if persona is not None else None
    turn.active_persona_id = persona.id if persona is not None else None
    turn.allowed_persona_ids = decision.persona_ids
    turn.whitelist_inherited = decision.inherited_from_parent
    turn.cooldown = decision.cooldown
    turn.llm_id = llm.id if llm is not None else None
    turn.llm_provider = llm.provider if llm is not None else None
    turn.llm_codename = llm.codename if llm is not None else None
    turn.llm_from_channel_override = model.from_channel_override
    turn.model_supports_tools = model.supports_tools
    turn.model_context_length = model.context_length
    turn.prompt_override = prompt.prompt if prompt else None
    turn.prompt_mode = prompt.mode if prompt else None
    turn.spotlight_persona_id = spotlight
    turn.sprite_names = tuple([s.name for s in sprites]) if sprites else ()
    turn.history_size = history.size
    turn.sprite_records = history.sprite_records
    turn.transcripts_found = history.transcripts_found
    turn.tables_found = history.tables_found
    turn.emoji_count = extras.emoji_count
    turn.sticker_count = extras.sticker_count
    turn.mcp_server_count = extras.mcp_server_count
    turn.st_preset = extras.st_preset
    turn.novelai_tier = extras.novelai_tier
    turn.stm_entries_found = memory.found
    turn.stm_user_turns = memory.user_turns
    turn.stm_server_turns = memory.server_turns
    turn.db_failures = ()
    turn.stale_layers = ()
    turn.__class__ = ResolvedTurn  # now frozen (see caches.core.frozen)
    return turn
