"""What the pipeline resolved for one message: its outcome and the turn's inputs."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tomori.repositories.channels import CooldownOverride, WhitelistDecision
from tomori.repositories.servers import PersonaRecord
from tomori.repositories.sprites import SpriteMessageRecord

if TYPE_CHECKING:
    from caches.layers.tomori_state import TomoriState
    from tomori.bot.pipeline.resolve import ModelChoice


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


def persona_fields(
    state: TomoriState,
    decision: WhitelistDecision,
    persona: PersonaRecord | None,
    spotlight: int | None,
) -> dict[str, Any]:
    """Return the ResolvedTurn fields that say who may answer and who does."""
    main = state.main_persona
    return {
        "persona_names": tuple(p.name for p in state.personas),
        "main_persona": main.name if main is not None else None,
        "active_persona": persona.name if persona is not None else None,
        "active_persona_id": persona.id if persona is not None else None,
        "allowed_persona_ids": decision.persona_ids,
        "whitelist_inherited": decision.inherited_from_parent,
        "cooldown": decision.cooldown,
        "spotlight_persona_id": spotlight,
    }


def model_fields(model: ModelChoice) -> dict[str, Any]:
    """Return the ResolvedTurn fields of the turn's model."""
    llm = model.llm
    return {
        "llm_id": llm.id if llm is not None else None,
        "llm_provider": llm.provider if llm is not None else None,
        "llm_codename": llm.codename if llm is not None else None,
        "llm_from_channel_override": model.from_channel_override,
        "model_supports_tools": model.supports_tools,
        "model_context_length": model.context_length,
    }
