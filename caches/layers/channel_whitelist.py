"""Channel whitelist cache (spec 4): may the bot answer here, for this member?

Two maps, registered as one layer (`GatedCache`):
- decisions: the tuple (server_disc_id, channel_disc_id, parent_disc_id or 0,
  roles) -> WhitelistDecision, the hit path;
- gate: server_disc_id -> ServerWhitelist, what every decision of the server
  is computed from (the server row's flag, its whitelisted channels with their
  personas and cooldowns, its whitelisted roles: 3-4 queries per server, single
  flight; CHANNEL_GATE_MAX_ENTRIES).
A decision miss in a server whose rows are cached is decided in memory and
stored with no query (before, each missed (channel, parent, roles) cost 3-4).

Keys: roles is the frozenset of the member's role ids, or None when the roles
are unknown; "no roles" (an empty frozenset) and "roles unknown" (None) are
different keys, and role order never matters. A server that keeps no role
whitelist gives every member the same answer, so that answer is stored once
per channel under roles ANY_ROLES ("*"), not once per role set (hundreds of
distinct sets per server); a lookup asks that key first. The parent is 0 for
a channel that is not a thread, so a thread's answer (which may be inherited
from its parent) never collides with its parent's. The key is built without
sorting or formatting: this lookup runs on every message.

Invalidating a channel drops the server's rows and the decisions of the
channel and its threads; a server change (its flag, a persona, a whitelisted
role) drops the rows and every decision of the server: the decisions on the
event loop in steps (caches.core.stepped), the server's questions decided
from freshly loaded rows without storing until the drop is done. A decision
waiting on its server's rows is a load of its key, so an invalidation meanwhile
keeps it out (the core's get_or_load). Database errors propagate and cache
nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Final, Literal, cast

from caches.core import (
    MISSING,
    BoundedTTLCache,
    Loader,
    ScopeSpec,
    SteppedDrop,
    Within,
)
from caches.layers._channel_override import GATE_CAP_SETTING
from caches.layers._feeds import Feed, server_disc_id_of
from caches.layers._maps import LayerMaps
from caches.layers._support import (
    GatedCache,
    cached,
    parse_gate_or,
    parse_int,
    run_db,
)
from caches.layers.declaration import (
    GuildBatch,
    GuildScope,
    KeyShape,
    Layer,
    LayerSettings,
    Operation,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from caches.turn_notes import note_miss
from tomori.domain.repositories import channels as channels_repo
from tomori.domain.repositories import population
from tomori.domain.repositories.channels import ServerWhitelist, WhitelistDecision

NAME = "channel_whitelist"
#: How an operator types "roles unknown" and "no roles" in a key.
ROLES_UNKNOWN = "?"
NO_ROLES = "-"
#: The roles slot of an answer that holds for every role set.
ANY_ROLES: Final = "*"
#: Stands for "not a thread" in the parent slot of a key (no snowflake is 0).
NO_PARENT = 0

RoleSignature = frozenset[int] | None
WhitelistKey = tuple[int, int, int, RoleSignature | Literal["*"]]


def _server_of(channel: tuple[int, int]) -> int:
    return channel[0]


def _channel_scope(key: WhitelistKey) -> tuple[tuple[int, int], ...]:
    # A thread's entry belongs to its parent channel too (key[2]).
    if key[2] == NO_PARENT:
        return ((key[0], key[1]),)
    return ((key[0], key[1]), (key[0], key[2]))


CAP_SETTING = "CHANNEL_WHITELIST_CACHE_MAX_ENTRIES"
TTL_SETTING = "CHANNEL_WHITELIST_CACHE_TTL_MINUTES"


SCOPES: dict[str, ScopeSpec] = {
    "channel": _channel_scope,
    # A server groups its channels: a server drop pops them and their keys,
    # and calls no scope function per key.
    "server": Within("channel", parent=_server_of),
}


class WhitelistMaps(LayerMaps):
    """The decision map (scoped by channel and server), the servers' rows, the drops."""

    __slots__ = ("decisions", "servers", "cache", "drops", "dropping")
    decisions: BoundedTTLCache[WhitelistKey, WhitelistDecision]
    servers: BoundedTTLCache[int, ServerWhitelist]
    cache: GatedCache
    # A server's decisions are dropped in steps (see caches.core.stepped); its
    # `pending` servers are decided without storing until they are gone.
    drops: SteppedDrop
    dropping: set[Hashable]

    def make(self, config: LayerSettings) -> GatedCache:
        """Make the decision map, the servers' rows and the drops stepping through it."""
        ttl = config.minutes(TTL_SETTING)
        self.decisions = config.cache(NAME, cap=CAP_SETTING, ttl=ttl, scopes=SCOPES)
        self.servers = config.cache(f"{NAME}:gate", cap=GATE_CAP_SETTING, ttl=ttl)
        self.cache = GatedCache(self.decisions, self.servers)
        self.drops = SteppedDrop(self.decisions, "server", via="channel")
        self.dropping = self.drops.pending
        return self.cache


_layer = WhitelistMaps(NAME)


#: Distinct role sets kept for sharing (cleared whole when full: only memory).
ROLE_SETS_MAX = 10_000
_role_sets: dict[frozenset[int], frozenset[int]] = {}


def intern_roles(roles: RoleSignature) -> RoleSignature:
    """Return the one shared frozenset equal to `roles`, so cached keys share it."""
    if roles is None:
        return None
    shared = _role_sets.get(roles)
    if shared is None:
        if len(_role_sets) >= ROLE_SETS_MAX:
            _role_sets.clear()
        shared = _role_sets[roles] = roles
    return shared


def role_signature(role_ids: Iterable[int] | None) -> RoleSignature:
    """Return the order-independent signature of a member's roles (None: unknown)."""
    return None if role_ids is None else frozenset(role_ids)


def whitelist_cache_key(
    server_disc_id: int,
    channel_disc_id: int,
    parent_disc_id: int | None = None,
    role_ids: Iterable[int] | None = None,
) -> WhitelistKey:
    """Return the cache key of one whitelist question."""
    roles = None if role_ids is None else frozenset(role_ids)
    return (server_disc_id, channel_disc_id, parent_disc_id or NO_PARENT, roles)


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
    dropping, cache = _layer.dropping, _layer.decisions  # each read once per hit
    if dropping and server_disc_id in dropping:
        # The server's old decisions are still being dropped: decide, store none.
        roles = None if role_ids is None else frozenset(role_ids)
        whitelist = await _server_whitelist(server_disc_id)
        return whitelist.decide(channel_disc_id, parent_disc_id, roles)
    # Keys are built inline: a function call is a fair share of a hit.
    parent = parent_disc_id or NO_PARENT
    any_key: WhitelistKey = (server_disc_id, channel_disc_id, parent, ANY_ROLES)
    decision = cache.peek(any_key)  # uncounted: one question counts once
    if decision is not MISSING:
        cache.hits += 1
        return decision  # type: ignore[no-any-return]
    roles = None if role_ids is None else frozenset(role_ids)
    decision = cache.get((server_disc_id, channel_disc_id, parent, roles))
    if decision is not MISSING:
        return decision  # type: ignore[no-any-return]
    return await _decide(server_disc_id, channel_disc_id, parent_disc_id, roles)


async def _decide(
    server_disc_id: int,
    channel_disc_id: int,
    parent_disc_id: int | None,
    roles: RoleSignature,
) -> WhitelistDecision:
    """Decide a missed question (counted) from the server's rows and store it."""
    cache = _layer.decisions
    # Stored keys share one frozenset per distinct role set (members repeat).
    roles = intern_roles(roles)
    parent = parent_disc_id or NO_PARENT
    key = (server_disc_id, channel_disc_id, parent, roles)
    whitelist = _layer.servers.get(server_disc_id)
    if whitelist is not MISSING:  # decided in memory: nothing awaited
        decision = whitelist.decide(channel_disc_id, parent_disc_id, roles)
        cache.set(_stored_key(key, decision), decision)
        return decision
    _layer.servers.misses -= 1  # its get_or_load below counts it
    cache.misses -= 1  # so does the decision's
    decision = await cache.get_or_load(
        key, _decider(server_disc_id, channel_disc_id, parent_disc_id, roles)
    )
    if not decision.restricts_by_role and cache.peek(key) is decision:
        # One answer for every role set: keep it once, under "*". Only this
        # load's stored answer moves: one a drop removed during the load stays
        # gone, and a stale load must not move a newer load's answer (which
        # may restrict by role) to where every role set reads it.
        cache.rekey(key, _stored_key(key, decision))
    return decision


def _stored_key(key: WhitelistKey, decision: WhitelistDecision) -> WhitelistKey:
    """Return where a decision is kept: under "*" when every role set gets it."""
    if decision.restricts_by_role:
        return key
    return (key[0], key[1], key[2], ANY_ROLES)


async def _server_whitelist(server_disc_id: int) -> ServerWhitelist:
    """Return the server's rows, loading them (single flight) on a miss."""
    servers = _layer.servers
    whitelist = cached(servers, server_disc_id)
    if whitelist is not MISSING:
        return whitelist  # type: ignore[no-any-return]
    note_miss(NAME)
    return await servers.get_or_load(  # type: ignore[no-any-return]
        server_disc_id,
        lambda: run_db(channels_repo.load_server_whitelist, server_disc_id),
    )


def _decider(
    server_disc_id: int,
    channel_disc_id: int,
    parent_disc_id: int | None,
    roles: RoleSignature,
) -> Loader[WhitelistDecision]:
    async def decide() -> WhitelistDecision:
        whitelist = await _server_whitelist(server_disc_id)
        return whitelist.decide(channel_disc_id, parent_disc_id, roles)

    return decide


async def _reload(key: Hashable) -> ServerWhitelist | WhitelistDecision:
    """Read a key afresh from the database (the consistency watcher)."""
    if isinstance(key, int):
        return await run_db(channels_repo.load_server_whitelist, key)
    server_disc_id, channel_disc_id, parent, roles = cast(WhitelistKey, key)
    return await run_db(
        channels_repo.load_whitelist_decision,
        server_disc_id=server_disc_id,
        channel_disc_id=channel_disc_id,
        parent_disc_id=parent or None,
        # An answer kept under "*" is the same for every role set.
        role_ids=frozenset() if roles == ANY_ROLES else roles,
    )


async def _warm(batch: GuildBatch) -> int:
    """Load the rows of a batch of servers (3-4 queries); return how many were stored."""
    return await _layer.servers.load_many(
        batch.server_disc_ids,
        lambda ids: run_db(channels_repo.load_server_whitelists, ids),
    )


def invalidate_whitelist_cache(
    server_disc_id: int, channel_disc_id: int | None = None
) -> int:
    """Drop a server's rows and its decisions, or one channel's and its threads'; return removals."""
    rows = _layer.servers.invalidate(server_disc_id)
    if channel_disc_id is None:
        return rows + _layer.drops.drop(server_disc_id)  # in steps on a running loop
    return rows + _layer.decisions.invalidate_scope(
        "channel", (server_disc_id, channel_disc_id)
    )


def invalidate_server_whitelist(server_disc_id: int) -> int:
    """Drop a server's rows and every decision of it; return removals."""
    return invalidate_whitelist_cache(server_disc_id)


def parse_whitelist_key(text: str) -> WhitelistKey:
    """Turn an operator-typed "server:channel:parent:roles" key into the cache key."""
    parts = text.strip().split(":")
    if len(parts) != 4:
        raise ValueError("expected four ':'-separated parts")
    server, channel, parent, roles = (part.strip() for part in parts)
    head = (
        parse_int(server),
        parse_int(channel),
        parse_int(parent) if parent not in {"", "0"} else NO_PARENT,
    )
    if roles == ANY_ROLES:
        return (*head, ANY_ROLES)
    if roles == ROLES_UNKNOWN:
        return (*head, None)
    if roles == NO_ROLES:
        return (*head, frozenset())
    return (*head, frozenset(parse_int(r) for r in roles.split(",")))


def _channel_phrase(server_disc_id: int, channel_disc_id: int | None = None) -> str:
    if channel_disc_id is None:
        return f"channel whitelist of server {server_disc_id}"
    return (
        f"channel whitelist of channel {channel_disc_id} and its threads "
        f"in server {server_disc_id}"
    )


LAYER = Layer(
    name=NAME,
    guild=GuildScope("server", "server_disc_id", scope="server"),
    description="Whitelist decisions per channel (thread parent) and member roles.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help=(
            "server_disc_id:channel_disc_id:parent_disc_id:roles, parent empty "
            "(or 0) for a non-thread, roles '?' (unknown), '-' (none), '*' "
            "(every role set: a server without a role whitelist) or ids joined "
            "by ',', or server_disc_id for the server's rows (the gate)"
        ),
        parse=parse_gate_or(parse_whitelist_key),
    ),
    feeds=(
        Feed(
            "tomori.Server",
            "server",
            ("server_disc_id",),
            fields=("channel_whitelist_enabled",),
        ),
        # Entries carry persona restrictions; a deleted persona's m2m rows
        # vanish without a signal, so the persona row answers for them.
        Feed("tomori.Persona", "server", (server_disc_id_of(),), fields=("name",)),
        Feed(
            "tomori.WhitelistedChannel",
            "channel",
            (server_disc_id_of(), "channel_disc_id"),
            m2m=("personas",),
        ),
        Feed("tomori.WhitelistedRole", "server", (server_disc_id_of(),)),
    ),
    build=_layer.build,
    settings=(CAP_SETTING, GATE_CAP_SETTING, TTL_SETTING),
    reload=_reload,
    warm=_warm,
    ops=(
        Operation(
            "server",
            invalidate_server_whitelist,
            description="Drop a server's rows and every decision of it.",
            phrase=lambda s: f"channel whitelist of server {s}",
        ),
        Operation(
            "channel",
            invalidate_whitelist_cache,
            description="Drop the server's rows and one channel's decisions and "
            "its threads'.",
            phrase=_channel_phrase,
        ),
    ),
    mistaken_for=PopulationSpec(
        "whitelisted channels", population.whitelisted_channels
    ),
)
