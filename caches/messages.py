"""Messages between processes: frozen dataclasses and their one JSON form.

On the bus (`caches.bus`) travel an `InvalidationBatch`, a `CommandMessage`
carrying one operator `Command`, and a `ReplyMessage` carrying a
`WorkerReply`; beside it in Redis (`caches.live`), each worker's
`WorkerSnapshot`; in the outbox table, a batch's events. `to_json()` returns
JSON-ready data under the field names the wire has always used; `from_json()`
validates received data and raises `MalformedMessage`, which every receiver
logs before dropping the message. Unknown fields are ignored and missing
optional ones take their defaults, so the older and newer processes of a
rolling deploy understand each other.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

VERSION = 1
INVALIDATE = "invalidate"
COMMAND = "command"
REPLY = "reply"
#: Replies to command <id> are pushed on the Redis list REPLY_PREFIX + <id>.
REPLY_PREFIX = "tomori:reply:"

#: One invalidation: `registry.apply(cache, op, *args)`.
EventTuple = tuple[str, str, tuple[Any, ...]]
T = TypeVar("T")


class MalformedMessage(ValueError):
    """Received data that is not a valid message; the text says what is wrong."""


# ------------------------------------------------------------------ field readers


def _check(ok: bool, value: Any, expected: str) -> None:
    if not ok:
        raise MalformedMessage(f"expected {expected}, got {value!r:.80}")


def _str(value: Any) -> str:
    _check(isinstance(value, str), value, "a string")
    return str(value)


def _int(value: Any) -> int:
    _check(isinstance(value, int) and not isinstance(value, bool), value, "an int")
    return int(value)


def _float(value: Any) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    _check(number, value, "a number")
    return float(value)


def _bool(value: Any) -> bool:
    _check(isinstance(value, bool), value, "true or false")
    return bool(value)


def _object(value: Any) -> dict[str, Any]:
    _check(isinstance(value, dict), value, "an object")
    return dict(value)


def _int_map(value: Any) -> dict[str, int]:
    return {str(k): _int(v) for k, v in _object(value).items()}


def _ints(value: Any) -> tuple[int, ...]:
    _check(isinstance(value, list | tuple), value, "an array")
    return tuple(_int(item) for item in value)


def _objects(value: Any) -> tuple[dict[str, Any], ...]:
    _check(isinstance(value, list | tuple), value, "an array")
    return tuple(_object(item) for item in value)


def _optional(read: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda value: None if value is None else read(value)


# Keyed by the annotation as written (the module uses postponed annotations).
_READERS: dict[str, Callable[[Any], Any]] = {
    "str": _str,
    "int": _int,
    "float": _float,
    "bool": _bool,
    "str | None": _optional(_str),
    "int | None": _optional(_int),
    "float | None": _optional(_float),
    "bool | None": _optional(_bool),
    "tuple[int, ...]": _ints,
    "tuple[int, ...] | None": _optional(_ints),
    "dict[str, Any]": _object,
    "dict[str, int]": _int_map,
    "tuple[dict[str, Any], ...]": _objects,
}


@functools.cache
def _field_plan(cls: type) -> tuple[tuple[str, str, bool], ...]:
    # (name, annotation, required) per field, worked out once per class.
    return tuple(
        (f.name, str(f.type), f.default is MISSING and f.default_factory is MISSING)
        for f in fields(cls)
    )


def _decode_fields(
    cls: type,
    data: Any,
    *,
    readers: Mapping[str, Callable[[Any], Any]] | None = None,
) -> dict[str, Any]:
    """Return `cls`'s constructor arguments read from `data`, or raise MalformedMessage.

    Fields of nested messages are read by the `readers` their class passes.
    """
    what = cls.__name__
    _check(isinstance(data, dict), data, f"a {what} object")
    values: dict[str, Any] = {}
    for name, annotation, required in _field_plan(cls):
        read = (readers and readers.get(name)) or _READERS.get(annotation)
        if read is None:  # a programming error, not a bad message
            raise TypeError(f"{what}.{name}: no reader for {annotation}")
        if name not in data:
            if required:
                raise MalformedMessage(f"{what}: {name} is missing")
            continue
        try:
            values[name] = read(data[name])
        except MalformedMessage as exc:
            raise MalformedMessage(f"{what}.{name}: {exc}") from None
    return values


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else value


def _encode_fields(message: object, *, skip: Iterable[str] = ()) -> dict[str, Any]:
    left_out = set(skip)
    kind: type = type(message)
    return {
        name: _plain(getattr(message, name))
        for name, _, _ in _field_plan(kind)
        if name not in left_out
    }


def _with_extra(data: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    # Layer- and process-specific figures travel flat beside the typed ones.
    return {**extra, **data}


def _extra(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k not in known}


# ------------------------------------------------------------------ events


def events_to_json(events: Iterable[EventTuple]) -> list[list[Any]]:
    """Return events as JSON-ready [cache, op, [args...]] triples."""
    return [[name, op, _plain(tuple(args))] for name, op, args in events]


def events_from_json(raw: Any) -> tuple[EventTuple, ...]:
    """Return the events of `raw` (arrays in args become tuples), or raise MalformedMessage."""
    _check(isinstance(raw, list), raw, "an array of events")
    events = []
    for item in raw:
        _check(
            isinstance(item, list) and len(item) == 3 and isinstance(item[2], list),
            item,
            "an event [cache, op, [args...]]",
        )
        events.append((_str(item[0]), _str(item[1]), _tuples(item[2])))
    return tuple(events)


def _tuples(value: Any) -> Any:
    # Cache keys such as (server_id, channel_disc_id) travel as arrays.
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    _check(not isinstance(value, dict), value, "a scalar or an array")
    return value


# ------------------------------------------------------------------ commands


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """An operator command: `id` a fresh uuid4 hex, `issued_at` Unix time."""

    OP: ClassVar[str] = ""

    id: str
    issued_by: str
    issued_at: float

    @classmethod
    def issue(cls: type[C], *, issued_by: str, **params: Any) -> C:
        """Return a new command of this kind, issued now by `issued_by`."""
        return cls(
            id=uuid.uuid4().hex, issued_by=issued_by, issued_at=time.time(), **params
        )

    @property
    def op(self) -> str:
        """Return the command's wire name ("clear_cache", ...)."""
        return self.OP

    def to_json(self) -> dict[str, Any]:
        """Return {"id", "op", params..., "issued_by", "issued_at"}."""
        return {"op": self.OP, **_encode_fields(self)}

    @staticmethod
    def from_json(data: Any) -> AnyCommand:
        """Return the command in `data`, or raise MalformedMessage (unknown op too)."""
        op = data.get("op") if isinstance(data, dict) else None
        kind = COMMANDS.get(op) if isinstance(op, str) else None
        if kind is None:
            raise MalformedMessage(f"unknown command op {op!r:.40}")
        return kind(**_decode_fields(kind, data))


C = TypeVar("C", bound=Command)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearCache(Command):
    """Clear one cache on every worker."""

    OP: ClassVar[str] = "clear_cache"
    cache: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidateKey(Command):
    """Drop one key, as the operator typed it, of one cache on every worker."""

    OP: ClassVar[str] = "invalidate_key"
    cache: str
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearAll(Command):
    """Clear every clearable cache (policy "clear") on every worker."""

    OP: ClassVar[str] = "clear_all"


@dataclass(frozen=True, slots=True, kw_only=True)
class EmergencyClear(Command):
    """Run the emergency clear; None leaves short-term memory to each worker's setting."""

    OP: ClassVar[str] = "emergency_clear"
    include_short_term_memory: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RefreshCatalogs(Command):
    """Refresh the OpenRouter catalogs (`fresh`: ignore the rate limit)."""

    OP: ClassVar[str] = "refresh_catalogs"
    fresh: bool = False


AnyCommand = ClearCache | InvalidateKey | ClearAll | EmergencyClear | RefreshCatalogs
COMMANDS: dict[str, type[AnyCommand]] = {
    kind.OP: kind
    for kind in (ClearCache, InvalidateKey, ClearAll, EmergencyClear, RefreshCatalogs)
}


# ------------------------------------------------------------------ replies


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerReply:
    """One worker's answer to a command.

    `details` per op: clear_cache {"cache", "removed"}; invalidate_key
    {"cache", "key", "removed"}; clear_all {"cleared": {cache: removed}};
    emergency_clear `EmergencyClearResult.as_dict()`; refresh_catalogs
    {"results": {catalog: refreshed?}, "sizes": {catalog: models}, "fresh"}.
    """

    worker_id: str
    ok: bool
    command_id: str | None = None
    op: str = ""
    shard_ids: tuple[int, ...] | None = None
    error: str | None = None
    removed: int = 0
    duration_ms: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: The bus origin of the process that answered (the bus fills it in).
    origin: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the reply as JSON-ready data."""
        return _encode_fields(self)

    @classmethod
    def from_json(cls, data: Any) -> WorkerReply:
        """Return the reply in `data`, or raise MalformedMessage."""
        return cls(**_decode_fields(cls, data))


# ------------------------------------------------------------------ bus envelopes


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """What every bus message carries: its sender, sequence number and send time."""

    KIND: ClassVar[str] = ""

    origin: str
    seq: int
    sent_at: float

    def to_json(self) -> dict[str, Any]:
        """Return the versioned envelope with this message's body."""
        return {"v": VERSION, "kind": self.KIND, **_encode_fields(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidationBatch(Envelope):
    """One committed write's invalidations, and the outbox rows that hold them."""

    KIND: ClassVar[str] = INVALIDATE
    events: tuple[EventTuple, ...] = ()
    outbox: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the envelope with [cache, op, [args...]] events."""
        # Spelled out: it runs once per committed write.
        return {
            "v": VERSION,
            "kind": INVALIDATE,
            "origin": self.origin,
            "seq": self.seq,
            "sent_at": self.sent_at,
            "events": events_to_json(self.events),
            "outbox": list(self.outbox),
        }

    @classmethod
    def from_json(cls, data: Any) -> InvalidationBatch:
        """Return the batch in `data`, or raise MalformedMessage."""
        return cls(**_decode_fields(cls, data, readers={"events": events_from_json}))


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandMessage(Envelope):
    """An operator command on its way to every worker; replies go to `reply_to`."""

    KIND: ClassVar[str] = COMMAND
    id: str
    reply_to: str
    timeout: float
    command: AnyCommand

    @classmethod
    def from_json(cls, data: Any) -> CommandMessage:
        """Return the command message in `data`, or raise MalformedMessage."""
        values = _decode_fields(cls, data, readers={"command": Command.from_json})
        if not values["reply_to"].startswith(REPLY_PREFIX):
            raise MalformedMessage(f"reply_to {values['reply_to']!r:.60} is not ours")
        return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyMessage(Envelope):
    """A process's answer to command `id`; `handled` False: it has no handler."""

    KIND: ClassVar[str] = REPLY
    id: str | None = None
    handled: bool
    reply: WorkerReply | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the envelope; an unhandled command's reply is {}."""
        body = Envelope.to_json(self)
        body["reply"] = {} if self.reply is None else self.reply.to_json()
        return body

    @classmethod
    def from_json(cls, data: Any) -> ReplyMessage:
        """Return the reply message in `data`, or raise MalformedMessage."""
        return cls(**_decode_fields(cls, data, readers={"reply": _reply_or_none}))


def _reply_or_none(value: Any) -> WorkerReply | None:
    # A process without a handler sends {}.
    return WorkerReply.from_json(value) if value else None


BusMessage = InvalidationBatch | CommandMessage | ReplyMessage
_KINDS: dict[str, Callable[[Any], BusMessage]] = {
    INVALIDATE: InvalidationBatch.from_json,
    COMMAND: CommandMessage.from_json,
    REPLY: ReplyMessage.from_json,
}


def encode(message: BusMessage) -> str:
    """Return `message` as compact JSON."""
    return json.dumps(message.to_json(), separators=(",", ":"))


def decode(data: bytes | str) -> BusMessage:
    """Return the bus message in `data`, or raise MalformedMessage."""
    try:
        raw = json.loads(data)
    except (TypeError, ValueError) as exc:
        raise MalformedMessage(f"not JSON: {exc}") from None
    _check(isinstance(raw, dict), raw, "a message object")
    if raw.get("v") != VERSION:
        raise MalformedMessage(f"version {raw.get('v')!r:.20} is not {VERSION}")
    parse = _KINDS.get(raw.get("kind"))  # type: ignore[arg-type]
    if parse is None:
        raise MalformedMessage(f"unknown kind {raw.get('kind')!r:.40}")
    return parse(raw)


# ------------------------------------------------------------------ worker snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheStats:
    """One cache layer of one worker: the registry's `stats()` for it."""

    size: int
    cap: int | None = None
    ttl: float | None = None  # seconds
    hits: int = 0
    misses: int = 0
    loads: int = 0
    load_failures: int = 0
    evictions: int = 0
    expirations: int = 0
    invalidations: int = 0
    last_invalidation: float | None = None  # Unix time
    policy: str = ""  # "clear" | "preserve" | "expired_only"
    description: str = ""
    invalidatable: bool = True
    #: Served from a last good value after a failed reload.
    stale_entries: int = 0
    #: A sampled estimate of the bytes the entries hold (None: not estimated).
    bytes_estimate: int | None = None
    #: A composite layer's member maps (label -> cap / size), primary first.
    member_caps: dict[str, int] = field(default_factory=dict)
    members: dict[str, int] = field(default_factory=dict)
    #: Figures only some layers have (tombstones, ready, in_flight ...).
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the figures as one flat object."""
        return _with_extra(_encode_fields(self, skip=["extra"]), self.extra)

    @classmethod
    def from_json(cls, data: Any) -> CacheStats:
        """Return the stats in `data` (also a registry `stats()` entry), or raise."""
        values = _decode_fields(cls, data)
        values["extra"] = _extra(cls, data)  # the figures beside the typed ones
        return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryFigures:
    """A worker's memory: RSS against its limit, the guard's state, libvips, the heap."""

    rss_mb: float | None = None
    python_allocated_blocks: int | None = None
    limit_mb: float | None = None
    #: "configured", "cgroup_v1"/"cgroup_v2", "host_total" (no container
    #: limit: the host's memory stands in), "guard" or "unknown".
    limit_source: str = "unknown"
    percent: float | None = None
    state: str | None = None  # the guard's: "safe" | "warning" | "critical"
    warning_percent: float | None = None
    critical_percent: float | None = None
    emergencies: int | None = None
    vips_tracked_mem_mb: float | None = None
    vips_tracked_mem_highwater_mb: float | None = None
    #: The other process figures (gc_gen<n>_count, vips_tracked_allocs ...).
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the figures as one flat object."""
        return _with_extra(_encode_fields(self, skip=["extra"]), self.extra)

    @classmethod
    def from_json(cls, data: Any) -> MemoryFigures:
        """Return the figures in `data`, or raise MalformedMessage."""
        values = _decode_fields(cls, data)
        values["extra"] = _extra(cls, data)  # the figures beside the typed ones
        return cls(**values)


def _cache_stats_map(value: Any) -> dict[str, CacheStats]:
    return {str(k): CacheStats.from_json(v) for k, v in _object(value).items()}


def _memory(value: Any) -> MemoryFigures | None:
    return MemoryFigures.from_json(value) if value else None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSnapshot:
    """One bot worker's live state, for the dashboard and the `cache_sizes` row."""

    worker_id: str
    shard_ids: tuple[int, ...] | None = None
    shard_count: int | None = None
    published_at: float | None = None  # Unix time (publishing sets it)
    started_at: float | None = None  # Unix time the worker started
    caches: dict[str, CacheStats] = field(default_factory=dict)
    #: discord.py's cache counts ("discord_members" ...); {} without a client.
    discord: dict[str, int] = field(default_factory=dict)
    memory: MemoryFigures | None = None
    #: The bus's figures (`caches.bus.stats()`, lag_p50_ms/lag_p99_ms, commands_run).
    bus: dict[str, Any] = field(default_factory=dict)
    catalogs: dict[str, Any] = field(default_factory=dict)  # name -> status()
    turns: dict[str, Any] = field(default_factory=dict)
    recent_turns: tuple[dict[str, Any], ...] = ()
    consistency: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the snapshot as JSON-ready data (memory {} when unknown)."""
        data = _encode_fields(self)
        data["memory"] = {} if self.memory is None else self.memory.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> WorkerSnapshot:
        """Return the snapshot in `data`, or raise MalformedMessage."""
        readers = {"caches": _cache_stats_map, "memory": _memory}
        return cls(**_decode_fields(cls, data, readers=readers))

    def published(self, at: float | None = None) -> WorkerSnapshot:
        """Return this snapshot stamped as published at `at` (default: now)."""
        return replace(self, published_at=time.time() if at is None else at)
