"""User cache (spec 2): user rows, privacy level and a per-server blacklist sub-cache.

One map holds two kinds of entry: `user_disc_id -> UserRecord | None` (the
row; None is a negative entry for an unknown user) and
`(server_disc_id, "*") -> frozenset` (the server's blacklist: the Discord
ids of its blacklisted users, the one shared empty set for the servers that
list nobody, which are most). A blacklist answer is membership in the
server's set: one entry and one query per server, not one per member (the
production scenario's 31,800 memberships filled the map to its cap with
answers that were nearly all "no"). Keeping rows and blacklists apart means
refreshing or invalidating a row keeps the blacklists, and a blacklist
change drops one server's set.

Fail closed: when the database cannot be read, privacy is the most
restrictive level and the user counts as blacklisted, and neither guess is
cached. Each failure is reported to `caches.db_outage` (one rate-limited
log; the pipeline then answers "database unavailable" where the guess would
have decided the turn).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable
from typing import Any, Final

from caches.core import MISSING, refreshing
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._feeds import Feed, server_disc_id_of
from caches.layers._maps import OneMap
from caches.layers._support import cached, parse_int, run_db
from caches.layers.declaration import (
    GuildScope,
    KeyShape,
    Layer,
    Operation,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from tomori.domain.repositories import population
from tomori.domain.repositories import users as users_repo
from tomori.domain.repositories.users import (
    DEFAULT_PRIVACY_LEVEL,
    MOST_RESTRICTIVE_PRIVACY_LEVEL,
    UserRecord,
)

NAME = "user"


#: The second slot of a server's blacklist key (a user row's key is an int).
EVERY_USER: Final = "*"

BlacklistKey = tuple[int, str]


CAP_SETTING = "USER_CACHE_MAX_ENTRIES"
TTL_SETTING = "USER_CACHE_TTL_MINUTES"

_layer: OneMap[Any, Any] = OneMap(NAME, cap=CAP_SETTING, ttl=TTL_SETTING)


def blacklist_cache_key(server_disc_id: int) -> BlacklistKey:
    """Return the key of a server's blacklist (the set of its blacklisted users)."""
    return (server_disc_id, EVERY_USER)


async def get_cached_user_row(user_disc_id: int) -> UserRecord | None:
    """Return the user's row (None: unknown user), loading it on a miss.

    A database error propagates (and nothing is cached).
    """
    row = cached(_layer.cache, user_disc_id)  # the hit path builds no closure
    if row is not MISSING:
        return row  # type: ignore[no-any-return]
    return await _layer.cache.get_or_load(  # type: ignore[no-any-return]
        user_disc_id, lambda: run_db(users_repo.get_user_by_disc_id, user_disc_id)
    )


#: User ids asked per query of a warm.
WARM_CHUNK = 5000


async def warm_users(user_disc_ids: Iterable[int], *, limit: int) -> int:
    """Load at most `limit` users' rows (None for unknown users) a few queries at a time.

    What a turn's miss would store, loaded in bulk: one query per WARM_CHUNK
    ids, each a database call of its own (turns' misses interleave). Users
    already cached or loading are skipped; a write during the warm wins over
    it (`BoundedTTLCache.load_many`). Returns the entries stored; database
    errors propagate.
    """
    ids = list(itertools.islice(user_disc_ids, limit))
    stored = 0
    for start in range(0, len(ids), WARM_CHUNK):
        stored += await _layer.cache.load_many(
            ids[start : start + WARM_CHUNK],
            lambda chunk: run_db(users_repo.get_users_by_disc_ids, chunk),
        )
    return stored


def user_ttl() -> float:
    """Return the user rows' TTL (seconds) as the map holds it (inf: no TTL)."""
    ttl = _layer.cache.ttl
    return float("inf") if ttl is None else ttl


#: The keys the cache held at the start of the refresh's period (slice 0):
#: each later check takes its slice by position, not by walking every key.
_held_at_start: list[Any] = []


async def refresh_users(part: int = 0, parts: int = 1) -> int:
    """Reload one slice of the user rows the cache holds, in bulk, with fresh deadlines.

    The worker's refresh-ahead (`caches.warm`): the rows warmed at ready all
    expire one TTL later, together. The keys held are listed once a period
    (at slice 0: one pass over the map) and each check reloads every
    `parts`-th of them from `part` on. Only resident rows are reloaded
    (`refreshing()`); blacklist entries are not (one per server). Returns
    the rows refreshed; database errors propagate.
    """
    global _held_at_start
    if part == 0 or not _held_at_start:
        _held_at_start = _layer.cache.keys()  # a snapshot: the store is not iterable
    ids = [key for key in _held_at_start[part::parts] if isinstance(key, int)]
    with refreshing():
        return await warm_users(ids, limit=len(ids))


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
    key = (server_disc_id, EVERY_USER)  # blacklist_cache_key, inlined
    listed = cached(_layer.cache, key)
    if listed is MISSING:
        try:
            listed = await _layer.cache.get_or_load(
                key, lambda: run_db(users_repo.blacklisted_users, server_disc_id)
            )
        except DB_ERRORS as exc:
            database_failed(NAME, exc)
            return True
    return user_disc_id in listed


def invalidate_user_cache(user_disc_id: int) -> int:
    """Drop the user's row (blacklists are the servers'); return removals."""
    return _layer.cache.invalidate(user_disc_id)


def invalidate_user_blacklist_cache(server_disc_id: int, user_disc_id: int) -> int:
    """Drop the blacklist holding this user's answer (the server's); return removals."""
    return invalidate_server_blacklist_cache(server_disc_id)


def invalidate_server_blacklist_cache(server_disc_id: int) -> int:
    """Drop the server's blacklist (every user's answer there); return removals."""
    return _layer.cache.invalidate(blacklist_cache_key(server_disc_id))


def parse_user_key(text: str) -> Hashable:
    """Parse "user_disc_id" (the row), or "server_disc_id:*" (the server's blacklist).

    "server_disc_id:user_disc_id" names the same blacklist: that user's
    answer lives in the server's set.
    """
    first, sep, second = text.strip().partition(":")
    if not sep:
        return parse_int(first)
    if second.strip() != EVERY_USER:
        parse_int(second)  # a user id: checked, then answered by the server's set
    return blacklist_cache_key(parse_int(first))


async def _reload(key: int | BlacklistKey) -> Any:
    if isinstance(key, tuple):
        return await run_db(users_repo.blacklisted_users, key[0])
    return await run_db(users_repo.get_user_by_disc_id, key)


LAYER = Layer(
    name=NAME,
    guild=GuildScope("blacklist_server", "server_disc_id"),
    description="User rows (privacy level) and per-server blacklists.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="user_disc_id for the row, or server_disc_id:* (also "
        "server_disc_id:user_disc_id) for the server's blacklist",
        parse=parse_user_key,
        phrase=lambda u: f"user {u}",
    ),
    feeds=(
        Feed("tomori.User", "key", ("user_disc_id",)),
        # A server's blacklist is one entry: the server alone names it (no
        # user lookup, which a cascade that deleted the user would defeat).
        Feed("tomori.UserBlacklist", "blacklist_server", (server_disc_id_of(),)),
        Feed("tomori.Server", "blacklist_server", ("server_disc_id",), fields=()),
    ),
    build=_layer.build,
    settings=(CAP_SETTING, TTL_SETTING),
    ops=(
        Operation(
            "blacklist",
            invalidate_user_blacklist_cache,
            description="Drop the blacklist that answers for one user in one server.",
            phrase=lambda s, u: f"blacklist entry of user {u} in server {s}",
        ),
        Operation(
            "blacklist_server",
            invalidate_server_blacklist_cache,
            description="Drop one server's blacklist.",
            phrase=lambda s: f"blacklist of server {s}",
        ),
    ),
    mistaken_for=PopulationSpec("known users", population.known_users),
    reload=_reload,
)
