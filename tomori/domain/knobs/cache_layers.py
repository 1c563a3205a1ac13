"""The cache layers' knobs: TTLs and entry caps, short-term memory, persona sprites.

A layer names the knobs it is built from in its declaration (`Layer(settings=...)`,
caches/layers/); tests/caches/layers/test_declarations.py checks that every name
is declared here and that every cache cap and TTL here is read by some layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tomori.domain.knobs.declare import cap, knob, minutes


@dataclass(frozen=True, kw_only=True)
class CacheKnobs:
    """Each layer's TTL and entry caps (TTLs: the spec's "Recommended Env Knobs")."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Cache TTLs and caps"

    TOMORI_STATE_CACHE_TTL_MINUTES: int = minutes(
        10,
        "TTL of the Tomori state (personas per server) cache; also the channel "
        "prompt and channel LLM caches.",
    )
    TOMORI_STATE_CACHE_MAX_ENTRIES: int = cap(
        5000, "Tomori state cache (one entry per server)"
    )
    USER_CACHE_TTL_MINUTES: int = minutes(
        30, "TTL of the user cache (user row, privacy level, blacklist sub-cache)."
    )
    USER_CACHE_MAX_ENTRIES: int = cap(
        50_000, "user cache (one entry per user row and one per server blacklist)"
    )
    EMOJI_STICKER_CACHE_TTL_MINUTES: int = minutes(
        10, "TTL of the emoji/sticker expression cache."
    )
    EMOJI_STICKER_CACHE_MAX_ENTRIES: int = cap(
        2000, "emoji/sticker cache (one entry per server)"
    )
    CHANNEL_WHITELIST_CACHE_TTL_MINUTES: int = minutes(
        5, "TTL of the channel whitelist decision cache."
    )
    CHANNEL_WHITELIST_CACHE_MAX_ENTRIES: int = cap(
        20_000, "channel whitelist cache (server:channel:parent:roles)"
    )
    CHANNEL_LLM_CACHE_MAX_ENTRIES: int = cap(20_000, "channel LLM override cache")
    CHANNEL_PROMPT_CACHE_MAX_ENTRIES: int = cap(20_000, "channel system prompt cache")
    CHANNEL_GATE_MAX_ENTRIES: int = cap(
        5000,
        "per-server maps of the channel whitelist, LLM and prompt caches (one "
        "entry per server in each: the channels with an override, the "
        "whitelist's rows)",
    )
    PERSONAL_SPOTLIGHT_CACHE_TTL_MINUTES: int = minutes(
        5, "TTL of the personal spotlight gate and result maps."
    )
    PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES: int = knob(
        2000,
        "Hard cap on the personal spotlight result map (server:user:channel).",
        minimum=1,
        maximum=10_000_000,
    )
    PERSONAL_SPOTLIGHT_GATE_MAX_ENTRIES: int = cap(
        5000, "personal spotlight gate (one entry per server)"
    )
    GUILD_MCP_CONFIG_CACHE_TTL_MINUTES: int = minutes(
        10, "TTL of the guild MCP server config cache."
    )
    GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES: int = cap(5000, "guild MCP config cache")
    ST_PRESET_CACHE_TTL_MINUTES: int = minutes(10, "TTL of the ST preset cache.")
    ST_PRESET_CACHE_MAX_ENTRIES: int = cap(5000, "ST preset cache")
    NOVELAI_SUBSCRIPTION_CACHE_TTL_MINUTES: int = minutes(
        1440, "TTL of the NovelAI subscription cache."
    )
    NOVELAI_SUBSCRIPTION_CACHE_MAX_ENTRIES: int = cap(
        5000, "NovelAI subscription cache"
    )
    LLM_CACHE_MAX_ENTRIES: int = cap(
        5000, "LLM model cache (warmed from the llms table)"
    )
    PRESET_AVATAR_CACHE_MAX_ENTRIES: int = cap(500, "preset avatar cache")
    PRESET_AVATAR_MAX_BYTES: int = knob(
        1_048_576,
        "Largest preset avatar PNG the cache accepts, in bytes.",
        minimum=1024,
        maximum=50_000_000,
    )
    VOICE_TRANSCRIPT_CACHE_TTL_MINUTES: int = minutes(
        120, "TTL of the voice transcript cache (message id -> transcript)."
    )
    VOICE_TRANSCRIPT_CACHE_MAX_ENTRIES: int = cap(10_000, "voice transcript cache")
    MARKDOWN_TABLE_CACHE_TTL_MINUTES: int = minutes(
        120, "TTL of the markdown table render cache."
    )
    MARKDOWN_TABLE_CACHE_MAX_ENTRIES: int = cap(5000, "markdown table cache")
    MARKDOWN_TABLE_BUTTON_TIMEOUT_MS: int = knob(
        7_200_000,
        "Lifetime of the 'Show Markdown' button; must not exceed the markdown table "
        "TTL.",
        minimum=1000,
    )
    WEBHOOK_CACHE_MAX_ENTRIES: int = cap(20_000, "channel and persona webhook caches")
    WEBHOOK_FAILURE_CACHE_TTL_MINUTES: int = minutes(
        15,
        "How long a channel whose webhook could not be made (missing permission, too "
        "many webhooks) is not retried.",
    )
    WEBHOOK_IDENTITY_CACHE_TTL_MINUTES: int = minutes(
        1440, "TTL of the webhook identity cache (webhook id -> impersonated user)."
    )
    WEBHOOK_IDENTITY_CACHE_MAX_ENTRIES: int = cap(20_000, "webhook identity cache")


@dataclass(frozen=True, kw_only=True)
class ShortTermMemoryKnobs:
    """The short-term memory layer's lifetimes and sizes, and its janitor."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Short-term memory"

    SHORT_TERM_MEMORY_TTL_HOURS: float = knob(
        12.0,
        "TTL of crude short-term memory entries (no summary).",
        minimum=0.01,
        maximum=8760,
    )
    SHORT_TERM_MEMORY_SUMMARY_TTL_HOURS: float = knob(
        24.0,
        "TTL of short-term memory entries that carry a summary.",
        minimum=0.01,
        maximum=8760,
    )
    SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH: int = knob(
        1500,
        "Summaries are truncated to this many characters.",
        minimum=1,
        maximum=100_000,
    )
    SHORT_TERM_MEMORY_DEFAULT_CRUDE_MESSAGE_COUNT: int = knob(
        6,
        "Messages a turn that answers captures in short-term memory (its own and "
        "those before it), and takes from a crude entry when building context.",
        minimum=1,
        maximum=1000,
    )
    SHORT_TERM_MEMORY_MAX_MESSAGES_PER_CHANNEL: int = knob(
        10,
        "Raw messages kept per short-term memory entry.",
        minimum=1,
        maximum=1000,
    )
    SHORT_TERM_MEMORY_MAX_OTHER_CHANNELS: int = knob(
        3,
        "Other channels of the server whose shared entry is visible from a channel.",
        minimum=0,
        maximum=100,
    )
    SHORT_TERM_MEMORY_CACHE_MAX_ENTRIES: int = cap(20_000, "short-term memory cache")
    STM_JANITOR_RETENTION_DAYS: int = knob(
        90,
        "The daily janitor deletes durable short-term memory rows older than this.",
        minimum=1,
        maximum=3650,
    )


@dataclass(frozen=True, kw_only=True)
class PersonaSpriteKnobs:
    """The persona sprite layers and the limits sprites are validated against."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Persona sprites"

    PERSONA_SPRITE_CACHE_TTL_MINUTES: int = knob(
        None,
        "TTL of the persona sprite cache; unset falls back to "
        "TOMORI_STATE_CACHE_TTL_MINUTES.",
        minimum=1,
        fallback="TOMORI_STATE_CACHE_TTL_MINUTES",
    )
    PERSONA_SPRITE_CACHE_MAX_ENTRIES: int = cap(
        5000, "persona sprite cache (one entry per persona)"
    )
    PERSONA_SPRITE_MAX_PER_PERSONA: int = knob(
        50,
        "Most sprites a persona may have.",
        minimum=1,
        maximum=1000,
    )
    PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH: int = knob(
        300,
        "Longest sprite instructions accepted (the database maximum is 1000).",
        minimum=1,
        maximum=1000,
    )
    PERSONA_SPRITE_PROMPT_MAX_COUNT: int = knob(
        20,
        "Most sprites listed in a prompt.",
        minimum=1,
        maximum=1000,
    )
    PERSONA_SPRITE_MESSAGE_CACHE_TTL_MINUTES: int = minutes(
        120,
        "TTL of the persona sprite message cache (bounds memory only; entries are "
        "immutable).",
    )
    PERSONA_SPRITE_MESSAGE_CACHE_MAX_ENTRIES: int = cap(
        50_000, "persona sprite message cache"
    )
    PERSONA_SPRITE_MESSAGE_RETENTION_DAYS: int = knob(
        30,
        "persona_sprite_messages rows older than this are pruned on the write path.",
        minimum=1,
        maximum=3650,
    )
