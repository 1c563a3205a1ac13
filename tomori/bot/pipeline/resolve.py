"""The per-layer steps of a turn, each a read (usually a hit) of one cache layer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from caches.catalogs import CatalogSet
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers.emoji_sticker import GuildExpressions, load_emoji_sticker_cache
from caches.layers.guild_mcp_config import get_cached_guild_mcp_configs
from caches.layers.llm import get_cached_default_llm, get_cached_llm
from caches.layers.novelai_subscription import get_cached_novelai_subscription
from caches.layers.personal_spotlight import get_cached_personal_spotlight_status
from caches.layers.st_preset import get_cached_st_preset
from caches.layers.tomori_state import TomoriState
from caches.layers.user import get_cached_user_row
from tomori.domain.repositories.channels import WhitelistDecision
from tomori.domain.repositories.expressions import GuildExpression
from tomori.domain.repositories.llms import LlmRecord
from tomori.domain.repositories.servers import PersonaRecord
from tomori.domain.repositories.users import (
    DEFAULT_PRIVACY_LEVEL,
    MOST_RESTRICTIVE_PRIVACY_LEVEL,
    UserRecord,
)

#: The provider whose models the OpenRouter text catalog describes.
OPENROUTER = "openrouter"
#: Provider whose default model a turn falls back to when nothing names one.
FALLBACK_PROVIDER = OPENROUTER

T = TypeVar("T")


class LazyExpressions(Sequence[GuildExpression]):
    """A guild's discord.py emojis or stickers, converted only when read.

    The emoji/sticker layer reads the guild's current expressions only on a
    miss (the sync check), so a hit must not pay for converting them.
    """

    __slots__ = ("_items", "_convert")

    def __init__(self, items: Sequence[Any], convert: Callable[[Any], GuildExpression]):
        self._items = items
        self._convert = convert

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._convert(item) for item in self._items[index]]
        return self._convert(self._items[index])


def _emoji(emoji: Any) -> GuildExpression:
    return GuildExpression(disc_id=emoji.id, name=emoji.name, animated=emoji.animated)


def _sticker(sticker: Any) -> GuildExpression:
    return GuildExpression(
        disc_id=sticker.id, name=sticker.name, description=sticker.description or ""
    )


def guild_expressions(guild: Any) -> GuildExpressions:
    """Return the guild's current emojis and stickers for the layer's sync check."""
    return GuildExpressions(
        emojis=LazyExpressions(guild.emojis, _emoji),
        stickers=LazyExpressions(guild.stickers, _sticker),
    )


async def user_and_privacy(user_disc_id: int) -> tuple[UserRecord | None, int]:
    """Return the user's row (None: unknown, or the database is down) and privacy level.

    One read of the user layer answers both (`get_cached_privacy_level`'s
    rules): the row's level, the default for an unknown user, the most
    restrictive one when the database fails.
    """
    try:
        row = await get_cached_user_row(user_disc_id)
    except DB_ERRORS as exc:
        database_failed("user", exc)
        return None, MOST_RESTRICTIVE_PRIVACY_LEVEL
    return row, row.privacy_level if row is not None else DEFAULT_PRIVACY_LEVEL


def role_ids(author: Any) -> Sequence[int] | None:
    """Return a member's role ids (None: not a Member, so roles are unknown)."""
    return getattr(author, "_roles", None)


async def spotlight_persona_id(
    state: TomoriState, user: UserRecord | None, channel_disc_id: int
) -> int | None:
    """Return the persona the user has spotlighted in the channel, or None."""
    if user is None:
        return None  # a spotlight row needs a user row
    record = await get_cached_personal_spotlight_status(
        state.server_id, user.id, channel_disc_id
    )
    return None if record is None else record.persona_id


def choose_persona(
    state: TomoriState, decision: WhitelistDecision, spotlight_id: int | None
) -> PersonaRecord | None:
    """Return who answers: the spotlighted persona, else the main one, within limits."""
    allowed = decision.persona_ids
    personas = state.personas
    if allowed:  # most channels allow every persona: no list to build
        personas = tuple([p for p in personas if p.id in allowed])
    for persona in personas:
        if persona.id == spotlight_id:
            return persona
    main = state.main_persona
    if main is not None and main in personas:
        return main
    return personas[0] if personas else None


class ModelChoice(NamedTuple):
    """The LLM of a turn and what the catalog says it can do.

    A NamedTuple (immutable, built at C speed): one is made per turn.
    """

    llm: LlmRecord | None
    from_channel_override: bool
    supports_tools: bool | None
    context_length: int | None


#: A quiet turn's model: none chosen (it does not answer).
NO_MODEL = ModelChoice(None, False, None, None)


def choose_model(
    state: TomoriState,
    persona: PersonaRecord | None,
    override_llm_id: int | None,
    catalogs: CatalogSet | None,
) -> ModelChoice:
    """Return the channel's, persona's or server's LLM, with its capabilities.

    The caller awaits `ensure_llm_cache()` first (a no-op unless llms rows
    changed); the choice itself reads only memory.
    """
    persona_llm = persona.llm_id if persona is not None else None
    llm_id = override_llm_id or persona_llm or state.llm_id
    llm = get_cached_llm(llm_id) if llm_id is not None else None
    if llm is None:
        llm = get_cached_default_llm(FALLBACK_PROVIDER)
    tools = llm.supports_tools if llm is not None else None
    context = llm.context_length if llm is not None else None
    if catalogs is not None and llm is not None and llm.provider == OPENROUTER:
        entry = catalogs.text.get(llm.codename)  # synchronous: never the network
        if entry is not None:
            tools = entry.supports_tools
            context = entry.token_limits.context_length or context
    return ModelChoice(llm, override_llm_id is not None, tools, context)


class ServerExtras(NamedTuple):
    """Per-server integrations a turn reads (a NamedTuple: one per turn)."""

    emoji_count: int
    sticker_count: int
    mcp_server_count: int
    st_preset: str | None
    novelai_tier: str | None


#: A quiet turn's extras: none read (it does not answer).
NO_EXTRAS = ServerExtras(0, 0, 0, None, None)


async def server_extras(
    state: TomoriState,
    guild: Any,
    persona: PersonaRecord | None,
    llm: LlmRecord | None,
) -> ServerExtras:
    """Read the server's expressions, MCP servers, ST preset and NovelAI tier."""
    stored = await load_emoji_sticker_cache(
        state.server_id,
        guild=lambda: guild_expressions(guild),  # built on a miss only
        emoji_enabled=state.emoji_usage_enabled,
        sticker_enabled=state.sticker_usage_enabled,
    )
    mcp = 0
    if state.tool_use_enabled and persona is not None and persona.tools_enabled:
        configs = (await get_cached_guild_mcp_configs(state.server_id)).configs
        mcp = sum(1 for c in configs if c.enabled)  # no tuple of them built
    preset = await get_cached_st_preset(state.server_id)
    tier = None
    if llm is not None and llm.provider == "novelai":
        subscription = await get_cached_novelai_subscription(state.server_id)
        tier = subscription.tier if subscription is not None else None
    return ServerExtras(
        emoji_count=len(stored.emojis or ()),
        sticker_count=len(stored.stickers or ()),
        mcp_server_count=mcp,
        st_preset=preset.name if preset is not None else None,
        novelai_tier=tier,
    )
