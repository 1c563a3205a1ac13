"""What a cache layer declares about itself, once, in its own module.

Each module in `caches/layers/` ends with one `LAYER = Layer(...)`: its name,
description, emergency policy, key shape, named operations (each with the
words a save message uses), what feeds it (the tables whose changes
invalidate it, or why none does), the settings its caches are built from,
the population its size is mistaken for, and the function that builds its
caches.
The registry, the invalidation rules, the save messages, the dashboard, the
Discord event handlers, the pipeline and the tests derive from these; nothing
else restates them.

Caches are built from settings when the registry is built (`caches.layers.
build_registry`: at `AppConfig.ready()`, again per test), never at import:
`build` is the method of the object that owns the layer's maps
(`caches.layers._maps`), which makes them afresh and returns the one the
registry holds.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from caches.core import BoundedTTLCache, ScopeSpec
from caches.layers._feeds import Feed, NotFed
from caches.registry import (
    BUILTIN_OPS,
    EmergencyPolicy,
    Event,
    ManagedCache,
    Reload,
    UnknownOperationError,
    parse_plain_key,
)
from tomori.domain.knobs import Knob


class UndeclaredSettingError(LookupError):
    """A layer's build read a setting its declaration does not list."""


def _arity(fn: Callable[..., Any]) -> tuple[int, int]:
    """Return (required, most) positional arguments `fn` takes."""
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    required = sum(p.default is p.empty for p in params)
    return required, len(params)


@dataclass(frozen=True)
class Operation:
    """A named invalidation a layer offers besides the built-in "key" and "all".

    `run(*args)` drops the entries and returns how many; `phrase(*args)` is
    what an admin save message and the bus log say it dropped.
    """

    name: str
    run: Callable[..., int]
    description: str
    phrase: Callable[..., str]


@dataclass(frozen=True)
class KeyShape:
    """How an operator types one key, and how a save message names it."""

    help: str
    parse: Callable[[str], Hashable] = parse_plain_key
    #: The save-message words for the "key" operation (None: the raw key).
    phrase: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class PopulationSpec:
    """The population a layer's size is mistaken for (the dashboard's column).

    `rows` returns a queryset from `tomori.domain.repositories.population`; its
    count is shown beside the layer's resident size.
    """

    label: str
    rows: Callable[[], Any]


@dataclass(frozen=True)
class GuildScope:
    """How to drop every entry of one guild: operation `op` of the guild's id.

    `by` names the id the operation takes: the internal `server_id` or the
    Discord `server_disc_id`. The bot leaving a guild runs it on every layer
    that declares one.
    """

    op: str
    by: Literal["server_id", "server_disc_id"]
    #: The scope index (of the layer's maps) that holds the guild's entries:
    #: the bot drains it in slices before running `op`, so dropping a big
    #: guild never blocks the event loop for long (None: `op` alone).
    scope: str | None = None


@dataclass(frozen=True)
class GuildBatch:
    """Servers whose per-server entries the worker warms before the gateway is ready.

    Both ids of each server, in the same order: a layer takes the one it keys by.
    """

    server_ids: tuple[int, ...]
    server_disc_ids: tuple[int, ...]


#: Load what each server of a batch would load on its first miss, in a few
#: queries, and store it as the layer's own loader would (never past its
#: cap, nothing an invalidation overlapped); return how many entries it stored.
Warm = Callable[[GuildBatch], Awaitable[int]]


@dataclass(frozen=True)
class EventOp:
    """One layer operation, checked when bound: calling it makes an Event."""

    cache: str
    op: str
    required: int
    most: int

    def __call__(self, *args: Any) -> Event:
        """Return the event `op(*args)` on this layer (wrong arity: TypeError)."""
        if not self.required <= len(args) <= self.most:
            raise TypeError(
                f"{self.cache}.{self.op} takes {self.required}..{self.most} "
                f"arguments, got {len(args)}"
            )
        return Event(self.cache, self.op, tuple(args))


class LayerSettings:
    """The settings one layer's build reads: only those it declares."""

    def __init__(
        self, layer: str, declared: tuple[str, ...], read: Callable[[str], Any]
    ) -> None:
        self.layer = layer
        self.declared = frozenset(declared)
        self._read = read

    def value(self, name: str) -> Any:
        """Return setting `name`; raise unless the layer declares it."""
        if name not in self.declared:
            raise UndeclaredSettingError(
                f"layer {self.layer!r} reads {name}, which its declaration's "
                f"settings do not list ({', '.join(sorted(self.declared))})"
            )
        return self._read(name)

    def cap(self, name: str) -> int:
        """Return the entry-cap setting `name`."""
        return int(self.value(name))

    def minutes(self, name: str) -> float:
        """Return the TTL setting `name` (minutes) in seconds."""
        return float(self.value(name)) * 60.0

    def cache(
        self,
        name: str,
        *,
        cap: str,
        ttl: float | None,
        scopes: Mapping[str, ScopeSpec] | None = None,
    ) -> BoundedTTLCache[Any, Any]:
        """Build one map: the cap from setting `cap`, `ttl` seconds, its scopes."""
        return BoundedTTLCache(name, maxsize=self.cap(cap), ttl=ttl, scopes=scopes)


@dataclass(frozen=True)
class Layer:
    """One cache layer, as its module declares it."""

    name: str
    description: str
    policy: EmergencyPolicy
    key: KeyShape
    #: Make the layer's maps from its settings (the `build` of the object
    #: owning them, `caches.layers._maps`) and return the one the registry holds.
    build: Callable[[LayerSettings], ManagedCache]
    #: The cap and TTL settings `build` reads (a change rebuilds the layer).
    settings: tuple[str, ...] = ()
    ops: tuple[Operation, ...] = ()
    mistaken_for: PopulationSpec | None = None
    #: Read one key afresh from the database (the consistency watcher).
    reload: Reload | None = None
    #: Warm a batch of servers' entries before the gateway is ready (`caches.warm`).
    warm: Warm | None = None
    #: False: no write can make an entry stale, so the bus never drops it.
    invalidatable: bool = True
    #: How to drop one guild's entries (None: the layer holds none per guild).
    guild: GuildScope | None = None
    #: The tables whose row changes invalidate this layer (`caches.layers._feeds`).
    feeds: tuple[Feed, ...] = ()
    #: Why no table feeds it: a layer declares `feeds` or this, never neither.
    not_fed: NotFed | None = None
    #: Knobs only this layer reads, declared here (`caches.layers._knobs`);
    #: their names join `settings`.
    knobs: tuple[Knob, ...] = ()
    _by_name: dict[str, Operation] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        own = tuple(k.name for k in self.knobs if k.name not in self.settings)
        object.__setattr__(self, "settings", (*self.settings, *own))
        by_name = {op.name: op for op in self.ops}
        clashing = sorted(set(by_name) & set(BUILTIN_OPS))
        if clashing or len(by_name) != len(self.ops):
            raise ValueError(f"layer {self.name!r}: bad operation names {clashing}")
        object.__setattr__(self, "_by_name", by_name)
        if self.guild is not None:
            self.op(self.guild.op)  # an unknown operation fails the import
        for feed in self.feeds:
            self.feed_op(feed)  # so does a feed naming one, or the wrong arity

    def feed_op(self, feed: Feed) -> EventOp:
        """Return the event maker `feed` calls; raise if its arguments do not fit."""
        op = self.op(feed.op)
        if not op.required <= len(feed.args) <= op.most:
            raise TypeError(
                f"layer {self.name!r}: the feed from {feed.model} passes "
                f"{len(feed.args)} arguments to {feed.op!r}, which takes "
                f"{op.required}..{op.most}"
            )
        return op

    def guild_event(
        self, *, server_id: int | None, server_disc_id: int
    ) -> Event | None:
        """Return the event dropping one guild's entries (None: nothing to drop).

        None also when the layer is keyed by the internal id and it is unknown.
        """
        if self.guild is None:
            return None
        guild_id = server_disc_id if self.guild.by == "server_disc_id" else server_id
        return None if guild_id is None else self.event(self.guild.op, guild_id)

    def op_names(self) -> list[str]:
        """Return every operation's name, built-ins first."""
        return [*BUILTIN_OPS, *sorted(self._by_name)]

    def operation(self, name: str) -> Operation:
        """Return the declared operation `name` (not a built-in one)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownOperationError(self.name, name, self.op_names()) from None

    def op(self, name: str) -> EventOp:
        """Return the event maker of operation `name`; an unknown name raises now."""
        if name == "key":
            return EventOp(self.name, name, 1, 1)
        if name == "all":
            return EventOp(self.name, name, 0, 0)
        required, most = _arity(self.operation(name).run)
        return EventOp(self.name, name, required, most)

    def event(self, op: str, *args: Any) -> Event:
        """Return the event `op(*args)` on this layer, checking the name and arity."""
        return self.op(op)(*args)

    def phrase(self, op: str, args: tuple[Any, ...]) -> str:
        """Return a save message's words for `op(*args)` on this layer."""
        if op == "all":
            return f"every entry of the {self.name} cache"
        if op == "key":
            (key,) = args
            return self.key.phrase(key) if self.key.phrase else f"{self.name} {key!r}"
        return self.operation(op).phrase(*args)

    def bound_ops(self) -> dict[str, Callable[..., int]]:
        """Return {name: run} of the declared operations (the registry's ops)."""
        return {op.name: op.run for op in self.ops}

    def settings_reader(self, read: Callable[[str], Any]) -> LayerSettings:
        """Return the reader `build` gets, limited to the declared settings."""
        return LayerSettings(self.name, self.settings, read)
