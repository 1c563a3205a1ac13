"""User cache (spec 2): user rows, privacy level and a per-server blacklist sub-cache.

One map holds two kinds of entry: `user_disc_id -> UserRecord | None` (the
row; None is a negative entry for an unknown user) and
`(server_disc_id, user_disc_id) -> bool` (the blacklist sub-entries, keyed
in the order the blacklist operation and its invalidation event take). Keeping
them apart means refreshing or invalidating a row keeps the blacklist answers,
and a blacklist change touches one sub-entry.

Fail closed: when the database cannot be read, privacy is the most
restrictive level and the user counts as blacklisted, and neither guess is
cached. Each failure is reported to `caches.db_outage` (one rate-limited
log; the pipeline then answers "database unavailable" where the guess would
have decided the turn).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from caches.core import MISSING, BoundedTTLCache
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._support import cached, parse_int, run_db
from caches.layers.declaration import (
    GuildScope,
    KeyShape,
    Layer,
    LayerSettings,
    Operation,
    PopulationSpec,
    unbuilt,
)
from caches.registry import EmergencyPolicy
from tomori.repositories import population
from tomori.repositories import users as users_repo
from tomori.repositories.users import (
    DEFAULT_PRIVACY_LEVEL,
    MOST_RESTRICTIVE_PRIVACY_LEVEL,
    UserRecord,
)

NAME = "user"


def _blacklist_user(key: object) -> tuple[int, ...]:
    return (key[1],) if isinstance(key, tuple) else ()


def _blacklist_server(key: object) -> tuple[int, ...]:
    return (key[0],) if isinstance(key, tuple) else ()


CAP_SETTING = "USER_CACHE_MAX_ENTRIES"
TTL_SETTING = "USER_CACHE_TTL_MINUTES"

_cache: BoundedTTLCache[Any, Any] = unbuilt(NAME)  # set by _build


def _build(config: LayerSettings) -> BoundedTTLCache[Any, Any]:
    """Build the one map of rows and blacklist answers from the layer's settings."""
    global _cache
    _cache = config.cache(
        NAME,
        cap=CAP_SETTING,
        ttl=config.minutes(TTL_SETTING),
        # Blacklist answers are keyed (server, user); user rows by the bare id.
        scopes={
            "blacklist_user": _blacklist_user,
            "blacklist_server": _blacklist_server,
        },
    )
    return _cache


def blacklist_cache_key(server_disc_id: int, user_disc_id: int) -> tuple[int, int]:
    """Return the sub-entry key of a user's blacklist answer in one server."""
    return (server_disc_id, user_disc_id)


async def get_cached_user_row(user_disc_id: int) -> UserRecord | None:
    """Return the user's row (None: unknown user), loading it on a miss.

    A database error propagates (and nothing is cached).
    """
    row = cached(_cache, user_disc_id)  # the hit path builds no closure
    if row is not MISSING:
        return row  # type: ignore[no-any-return]
    return await _cache.get_or_load(  # type: ignore[no-any-return]
        user_disc_id, lambda: run_db(users_repo.get_user_by_disc_id, user_disc_id)
    )


async def get_cached_privacy_level(user_disc_id: int) -> int:
    """Return the user's privacy level; the most restrictive one if the database fails."""
    try:
        row = await get_cached_user_row(user_disc_id)
    except DB_ERRORS as exc:
        database_failed(NAME, exc)
        return MOST_RESTRICTIVE_PRIVACY_LEVEL
    return row.privacy_level if row is not None else DEFAULT_PRIVACY_LEVEL


async def get_cached_blacklist_status(server_disc_id: int, user_disc_id: int) -> bool:
    """Tell whether the user is blacklisted in the server; True if the database fails."""
    key = (server_disc_id, user_disc_id)  # blacklist_cache_key, inlined
    listed = cached(_cache, key)
    if listed is not MISSING:
        return listed  # type: ignore[no-any-return]
    try:
        return await _cache.get_or_load(  # type: ignore[no-any-return]
            key,
            lambda: run_db(
                users_repo.is_user_blacklisted,
                server_disc_id=server_disc_id,
                user_disc_id=user_disc_id,
            ),
        )
    except DB_ERRORS as exc:
        database_failed(NAME, exc)
        return True


def invalidate_user_cache(user_disc_id: int, *, include_blacklist: bool = False) -> int:
    """Drop the user's row (and, if asked, every blacklist answer); return removals."""
    removed = _cache.invalidate(user_disc_id)
    if include_blacklist:
        removed += _cache.invalidate_scope("blacklist_user", user_disc_id)
    return removed


def invalidate_user_blacklist_cache(server_disc_id: int, user_disc_id: int) -> int:
    """Drop one blacklist answer (this user in this server); return removals."""
    return _cache.invalidate(blacklist_cache_key(server_disc_id, user_disc_id))


def invalidate_server_blacklist_cache(server_disc_id: int) -> int:
    """Drop every user's blacklist answer for this server; return removals."""
    return _cache.invalidate_scope("blacklist_server", server_disc_id)


def parse_user_key(text: str) -> Hashable:
    """Parse "user_disc_id" (the row) or "server_disc_id:user_disc_id" (a blacklist answer)."""
    first, sep, second = text.strip().partition(":")
    if not sep:
        return parse_int(first)
    return blacklist_cache_key(parse_int(first), parse_int(second))


async def _reload(key: int | tuple[int, int]) -> Any:
    if isinstance(key, tuple):
        server_disc_id, user_disc_id = key
        return await run_db(
            users_repo.is_user_blacklisted,
            server_disc_id=server_disc_id,
            user_disc_id=user_disc_id,
        )
    return await run_db(users_repo.get_user_by_disc_id, key)


LAYER = Layer(
    name=NAME,
    guild=GuildScope("blacklist_server", "server_disc_id", scope="blacklist_server"),
    description="User rows (privacy level) and per-server blacklist answers.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="user_disc_id for the row, or server_disc_id:user_disc_id for a "
        "blacklist answer",
        parse=parse_user_key,
        phrase=lambda u: f"user {u}",
    ),
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
    ops=(
        Operation(
            "blacklist",
            invalidate_user_blacklist_cache,
            description="Drop one user's blacklist answer in one server.",
            phrase=lambda s, u: f"blacklist entry of user {u} in server {s}",
        ),
        Operation(
            "blacklist_server",
            invalidate_server_blacklist_cache,
            description="Drop every user's blacklist answer in one server.",
            phrase=lambda s: f"blacklist entries of server {s}",
        ),
    ),
    mistaken_for=PopulationSpec("known users", population.known_users),
    reload=_reload,
)
