"""Channel whitelist cache (spec 4): may the bot answer here, for this member?

Key: "server_disc_id:channel_disc_id:parent_disc_id:role_signature". The
parent is empty for a channel that is not a thread, so a thread's answer
(which may be inherited from its parent) never collides with its parent's.
The role signature is order-independent; "roles unknown" ("?") and "no roles"
("-") are different keys. Invalidating a channel also drops the entries of
its threads. Database errors propagate and cache nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from caches.layers._support import minutes_setting, new_cache, parse_int, run_db
from caches.registry import EmergencyPolicy, registry
from tomori.repositories import channels as channels_repo
from tomori.repositories.channels import WhitelistDecision

NAME = "channel_whitelist"
ROLES_UNKNOWN = "?"
NO_ROLES = "-"

_cache = new_cache(
    NAME,
    cap_setting="CHANNEL_WHITELIST_CACHE_MAX_ENTRIES",
    ttl=minutes_setting("CHANNEL_WHITELIST_CACHE_TTL_MINUTES"),
)


def role_signature(role_ids: Iterable[int] | None) -> str:
    """Return the order-independent signature of a member's roles."""
    if role_ids is None:
        return ROLES_UNKNOWN
    ids = sorted(set(role_ids))
    return ",".join(map(str, ids)) if ids else NO_ROLES


def whitelist_cache_key(
    server_disc_id: int,
    channel_disc_id: int,
    parent_disc_id: int | None = None,
    role_ids: Iterable[int] | None = None,
) -> str:
    """Return the cache key of one whitelist question."""
    parent = "" if parent_disc_id is None else str(parent_disc_id)
    return f"{server_disc_id}:{channel_disc_id}:{parent}:{role_signature(role_ids)}"


async def get_cached_whitelist_status(
    server_disc_id: int,
    channel_disc_id: int,
    *,
    parent_disc_id: int | None = None,
    role_ids: Iterable[int] | None = None,
) -> WhitelistDecision:
    """Return the whitelist decision for a channel (or thread) and member roles.

    `role_ids` None means the member's roles are unknown; the decision then
    has `role_allowed` None when the server restricts by role.
    """
    roles = None if role_ids is None else frozenset(role_ids)
    key = whitelist_cache_key(server_disc_id, channel_disc_id, parent_disc_id, roles)
    return await _cache.get_or_load(  # type: ignore[no-any-return]
        key,
        lambda: run_db(
            channels_repo.load_whitelist_decision,
            server_disc_id=server_disc_id,
            channel_disc_id=channel_disc_id,
            parent_disc_id=parent_disc_id,
            role_ids=roles,
        ),
    )


def invalidate_whitelist_cache(
    server_disc_id: int, channel_disc_id: int | None = None
) -> int:
    """Drop a server's entries, or one channel's and its threads'; return removals."""
    server = str(server_disc_id)
    if channel_disc_id is None:
        return _cache.invalidate_prefix(f"{server}:")
    channel = str(channel_disc_id)

    def matches(key: object) -> bool:
        if not isinstance(key, str):
            return False
        parts = key.split(":", 3)
        return parts[0] == server and channel in (parts[1], parts[2])

    return _cache.invalidate_where(matches)


def invalidate_server_whitelist(server_disc_id: int) -> int:
    """Drop every entry of a server; return removals."""
    return invalidate_whitelist_cache(server_disc_id)


def parse_whitelist_key(text: str) -> str:
    """Check an operator-typed "server:channel:parent:roles" key and normalise it."""
    parts = text.strip().split(":")
    if len(parts) != 4:
        raise ValueError("expected four ':'-separated parts")
    server, channel, parent, roles = parts
    role_ids: list[int] | None = None
    if roles == NO_ROLES:
        role_ids = []
    elif roles != ROLES_UNKNOWN:
        role_ids = [parse_int(r) for r in roles.split(",")]
    return whitelist_cache_key(
        parse_int(server),
        parse_int(channel),
        parse_int(parent) if parent else None,
        role_ids,
    )


registry.register(
    NAME,
    _cache,
    policy=EmergencyPolicy.CLEAR,
    description="Whitelist decisions per channel (thread parent) and member roles.",
    key_help=(
        "server_disc_id:channel_disc_id:parent_disc_id:roles, parent empty for a "
        "non-thread, roles '?' (unknown), '-' (none) or sorted ids joined by ','"
    ),
    parse_key=parse_whitelist_key,
    ops={"server": invalidate_server_whitelist, "channel": invalidate_whitelist_cache},
)
