"""Cache keys of short-term memory: `shortterm:{user|server}:{owner}:{channel}[:{persona}]`."""

from __future__ import annotations

import re
from dataclasses import dataclass

USER = "user"
SERVER = "server"
PREFIX = "shortterm:"

_KEY_RE = re.compile(r"^shortterm:(user|server):([0-9]+):([0-9]+)(?::([0-9]+))?$")


def user_short_term_memory_key(
    user_disc_id: int, channel_disc_id: int, persona_id: int | None = None
) -> str:
    """Return the user-scoped key (`shortterm:user:{user}:{channel}[:{persona}]`)."""
    return short_term_memory_key(USER, user_disc_id, channel_disc_id, persona_id)


def server_short_term_memory_key(
    server_disc_id: int, channel_disc_id: int, persona_id: int | None = None
) -> str:
    """Return the server-shared key (`shortterm:server:{server}:{channel}[:{persona}]`)."""
    return short_term_memory_key(SERVER, server_disc_id, channel_disc_id, persona_id)


def short_term_memory_key(
    scope: str, owner: int, channel: int, persona: int | None = None
) -> str:
    """Return the key of `scope` (USER or SERVER) for `owner` in `channel`."""
    if persona is None:
        return f"{PREFIX}{scope}:{owner}:{channel}"
    return f"{PREFIX}{scope}:{owner}:{channel}:{persona}"


def key_owner(key: str) -> tuple[str, int] | None:
    """Return (scope, owner) of a key, or None if it is not one (no regex: hot enough)."""
    parts = key.split(":", 3)
    if len(parts) < 4 or parts[0] != PREFIX[:-1] or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """The parts of a short-term memory key."""

    scope: str
    owner: int
    channel_disc_id: int
    persona_id: int | None


def parse_short_term_memory_key(text: str) -> ParsedKey:
    """Split a key into its parts, or raise ValueError."""
    match = _KEY_RE.match(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not shortterm:user|server:<id>:<channel>[:<persona>]"
        )
    scope, owner, channel, persona = match.groups()
    return ParsedKey(scope, int(owner), int(channel), int(persona) if persona else None)


def parse_registry_key(text: str) -> str:
    """Validate an operator-typed key and return it as the cache key."""
    from tomori.domain.models.validation import parse_snowflake

    parsed = parse_short_term_memory_key(text)
    ids = (parsed.owner, parsed.channel_disc_id, parsed.persona_id)
    for value in ids:
        if value is not None:
            parse_snowflake(str(value))  # 1..2^63-1, like every operator id
    return text.strip()
