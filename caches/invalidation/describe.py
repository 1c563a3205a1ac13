"""Describe invalidation events in words, for admin messages and logs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from caches.rules import Event

# Discord snowflakes print bare; internal primary keys print as "#id".
_PHRASES: dict[tuple[str, str], Callable[..., str]] = {
    ("tomori_state", "key"): lambda s: f"Tomori state of server {s}",
    ("user", "key"): lambda u: f"user {u}",
    ("user", "blacklist"): lambda s, u: f"blacklist entry of user {u} in server {s}",
    ("user", "blacklist_server"): lambda s: f"blacklist entries of server {s}",
    ("emoji_sticker", "key"): lambda s: f"emojis and stickers of server #{s}",
    ("channel_whitelist", "server"): lambda s: f"channel whitelist of server {s}",
    ("channel_whitelist", "channel"): lambda s, c: (
        f"channel whitelist of channel {c} and its threads in server {s}"
    ),
    ("channel_llm", "server"): lambda s: f"channel LLM overrides of server #{s}",
    ("channel_llm", "channel"): lambda s, c: (
        f"LLM override of channel {c} and its threads in server #{s}"
    ),
    ("channel_prompt", "key"): lambda k: (
        f"system prompt override of channel {k[1]} in server #{k[0]}"
    ),
    ("channel_prompt", "server"): lambda s: f"channel prompt overrides of server #{s}",
    ("persona_sprite", "key"): lambda p: f"sprites of persona #{p}",
    ("personal_spotlight", "spotlight"): lambda s, u, c: (
        f"personal spotlights of {'user #' + str(u) if u is not None else 'every user'}"
        f" in {'channel ' + str(c) if c is not None else 'every channel'}"
        f" of server #{s}, and the server's spotlight gate"
    ),
    ("guild_mcp_config", "key"): lambda s: f"MCP configuration of server #{s}",
    ("st_preset", "key"): lambda s: f"ST presets of server #{s}",
    ("novelai_subscription", "key"): lambda s: f"NovelAI subscription of server #{s}",
    ("llm", "key"): lambda i: f"LLM #{i}",
    ("llm", "reload"): lambda: "the LLM list (reloaded)",
    ("preset_avatar", "key"): lambda i: f"avatar of preset persona #{i}",
    ("webhook", "channel"): lambda c: f"webhooks of channel {c}",
    ("webhook", "persona"): lambda p: f"webhooks of persona #{p}",
}


def describe_event(event: Event | tuple[str, str, tuple[Any, ...]]) -> str:
    """Return one event in words ("Tomori state of server 123")."""
    name, op, args = event
    if op == "all":
        return f"every entry of the {name} cache"
    phrase = _PHRASES.get((name, op))
    if phrase is not None:
        try:
            return phrase(*args)
        except (TypeError, IndexError):
            pass
    return f"{name}: {op}({', '.join(map(repr, args))})"


def describe(events: Iterable[Event | tuple[str, str, tuple[Any, ...]]]) -> list[str]:
    """Return each event in words, in order, without repeats."""
    return list(dict.fromkeys(describe_event(event) for event in events))
