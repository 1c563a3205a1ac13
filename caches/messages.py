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
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
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

# Bounds on what a receiver accepts: anyone who can reach Redis can publish.
#: A bus message longer than this (characters of JSON) is refused unread.
MAX_MESSAGE_CHARS = 8 * 2**20
#: Arrays and objects nest at most this deep in a message.
MAX_DEPTH = 32
#: A string field (an error text, an operator's key) holds at most this much.
MAX_TEXT = 10_000
#: An origin, a cache name or an operation name.
MAX_NAME = 200
#: One event argument: a key part (ids, codenames, "shortterm:..." keys).
MAX_ARG = 1_000
#: Nesting of one event's arguments: (server, channel) keys are one level.
MAX_ARG_DEPTH = 4
#: Events in one batch, and outbox ids it names.
MAX_EVENTS = 100_000
#: Integers fit PostgreSQL's bigint (ids, sequence numbers, counters).
MAX_INT = 2**63 - 1


class MalformedMessage(ValueError):
    """Received data that is not a valid message; the text says what is wrong.

    `kind` names the rule it broke ("not JSON", "InvalidationBatch.sent_at",
    ...): receivers log the first rejection of each kind and count the rest.
    """

    def __init__(self, text: str, *, kind: str = "malformed") -> None:
        super().__init__(text)
        self.kind = kind


# ------------------------------------------------------------------ field readers


def _check(ok: bool, value: Any, expected: str) -> None:
    if not ok:
        raise MalformedMessage(f"expected {expected}, got {value!r:.80}")


# The readers test the common case first and plainly: they run per message.


def _str(value: Any, limit: int = MAX_TEXT) -> str:
    if type(value) is str and len(value) <= limit:
        return value
    _check(isinstance(value, str), value, "a string")
    _check(len(value) <= limit, value, f"at most {limit} characters")
    return str(value)


def _name(value: Any) -> str:
    return _str(value, MAX_NAME)


def _int(value: Any) -> int:
    if type(value) is int and -MAX_INT <= value <= MAX_INT:
        return value
    _check(isinstance(value, int) and not isinstance(value, bool), value, "an int")
    _check(-MAX_INT <= value <= MAX_INT, value, "a 64-bit int")
    return int(value)


def _seq(value: Any) -> int:
    number = _int(value)
    _check(number >= 0, value, "a sequence number (0 or more)")
    return number


def _float(value: Any) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    _check(number, value, "a number")
    _check(
        number and abs(value) <= MAX_INT and math.isfinite(value),
        value,
        "a finite number",
    )
    return float(value)


def _timestamp(value: Any) -> float:
    # Unix time, and one a lag can be measured against (no year 1 or 3000).
    seconds = _float(value)
    _check(0.0 <= seconds <= 1e10, value, "a Unix time")
    return seconds


def _bool(value: Any) -> bool:
    _check(isinstance(value, bool), value, "true or false")
    return bool(value)


def _object(value: Any) -> dict[str, Any]:
    # Free-form content (a reply's details, a snapshot's figures): bounded depth.
    _check(isinstance(value, dict), value, "an object")
    _check(not _depth_over(value, MAX_DEPTH), "...", f"nesting under {MAX_DEPTH}")
    return dict(value)


def _int_map(value: Any) -> dict[str, int]:
    return {str(k): _int(v) for k, v in _object(value).items()}


def _ints(value: Any) -> tuple[int, ...]:
    _check(isinstance(value, list | tuple), value, "an array")
    _check(len(value) <= MAX_EVENTS, len(value), f"at most {MAX_EVENTS} items")
    return tuple(_int(item) for item in value)


def _objects(value: Any) -> tuple[dict[str, Any], ...]:
    _check(isinstance(value, list | tuple), value, "an array")
    _check(len(value) <= MAX_EVENTS, len(value), f"at most {MAX_EVENTS} items")
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
                raise MalformedMessage(
                    f"{what}: {name} is missing", kind=f"{what}.{name}"
                )
            continue
        try:
            values[name] = read(data[name])
        except MalformedMessage as exc:
            raise MalformedMessage(
                f"{what}.{name}: {exc}", kind=f"{what}.{name}"
            ) from None
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
    _check(len(raw) <= MAX_EVENTS, len(raw), f"at most {MAX_EVENTS} events")
    return tuple(map(event_from_json, raw))


def event_from_json(item: Any) -> EventTuple:
    """Return one event of a JSON array of events, or raise MalformedMessage."""
    if not (type(item) is list and len(item) == 3 and type(item[2]) is list):
        raise MalformedMessage(
            f"expected an event [cache, op, [args...]], got {item!r:.80}"
        )
    return (_str(item[0], MAX_NAME), _str(item[1], MAX_NAME), _arguments(item[2]))


_DECODER = json.JSONDecoder()
_BLANK = re.compile(r"[ \t\n\r]*")


def iter_events_text(text: str) -> Iterator[EventTuple]:
    """Yield the events of a JSON array's text one by one, parsing as it goes.

    What `events_from_json(json.loads(text))` returns, without parsing more
    than the caller takes: a worker applies a 30,000-event outbox row a few
    dozen events a loop callback. Raises MalformedMessage where the text
    stops being an array of events (what came before it was yielded).
    """
    at = _BLANK.match(text).end()  # type: ignore[union-attr]
    _check(text[at : at + 1] == "[", text[:80], "an array of events")
    at = _BLANK.match(text, at + 1).end()  # type: ignore[union-attr]
    closed = text[at : at + 1] == "]"
    count = 0
    while not closed:
        try:
            item, at = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError) as exc:
            raise MalformedMessage(f"not JSON: {exc}") from None
        count += 1
        _check(count <= MAX_EVENTS, count, f"at most {MAX_EVENTS} events")
        yield event_from_json(item)
        at = _BLANK.match(text, at).end()  # type: ignore[union-attr]
        following = text[at : at + 1]
        _check(following in (",", "]"), text[at : at + 80], "',' or ']'")
        closed = following == "]"
        if not closed:
            at = _BLANK.match(text, at + 1).end()  # type: ignore[union-attr]
    end = _BLANK.match(text, at + 1).end()  # type: ignore[union-attr]
    _check(end == len(text), text[end : end + 80], "nothing after ']'")


def _arguments(args: list[Any]) -> tuple[Any, ...]:
    # Flat ids, the usual case, without a call per argument.
    if len(args) <= MAX_ARG and all(
        type(a) is int and -MAX_INT <= a <= MAX_INT for a in args
    ):
        return tuple(args)
    return _tuples(args, 0)  # type: ignore[no-any-return]


def _tuples(value: Any, depth: int) -> Any:
    # Cache keys such as (server_id, channel_disc_id) travel as arrays.
    if isinstance(value, int) and not isinstance(value, bool):
        return _int(value)  # the usual key: an id
    if isinstance(value, list):
        _check(depth < MAX_ARG_DEPTH, value, f"arguments nested under {MAX_ARG_DEPTH}")
        _check(len(value) <= MAX_ARG, len(value), f"at most {MAX_ARG} arguments")
        return tuple(_tuples(v, depth + 1) for v in value)
    if isinstance(value, str):
        return _str(value, MAX_ARG)
    if isinstance(value, float):
        return _float(value)
    _check(value is None or isinstance(value, bool), value, "a scalar or an array")
    return value


# ------------------------------------------------------------------ commands


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """An operator command: `id` a fresh uuid4 hex, `issued_at` Unix time."""

    OP: ClassVar[str] = ""
    #: Readers of the fields whose annotation alone does not say how to read them.
    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

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
        return kind(**_decode_fields(kind, data, readers=kind.READERS))


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


#: The commands a worker carries out; sent alone, every worker does.
FleetCommand = ClearCache | InvalidateKey | ClearAll | EmergencyClear | RefreshCatalogs


def _fleet_command(value: Any) -> FleetCommand:
    command = Command.from_json(value)
    if isinstance(command, OnWorker):
        raise MalformedMessage("an on_worker command cannot carry another")
    return command


@dataclass(frozen=True, slots=True, kw_only=True)
class OnWorker(Command):
    """Run `command` on the worker `worker_id` alone; every other worker declines it.

    An op of its own rather than a field of every command: a worker from
    before it refuses an unknown op (and does not answer), where it would
    ignore an unknown field and run the command it carries.
    """

    OP: ClassVar[str] = "on_worker"
    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "worker_id": _name,
        "command": _fleet_command,
    }
    worker_id: str
    command: FleetCommand


AnyCommand = FleetCommand | OnWorker
COMMANDS: dict[str, type[AnyCommand]] = {
    kind.OP: kind
    for kind in (
        ClearCache,
        InvalidateKey,
        ClearAll,
        EmergencyClear,
        RefreshCatalogs,
        OnWorker,
    )
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

    #: How every envelope's own fields are read (bounded, finite).
    READERS: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "origin": _name,
        "seq": _seq,
        "sent_at": _timestamp,
    }

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
        return cls(**_decode_fields(cls, data, readers=_BATCH_READERS))


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
        values = _decode_fields(cls, data, readers=_COMMAND_READERS)
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
        return cls(**_decode_fields(cls, data, readers=_REPLY_READERS))


def _reply_or_none(value: Any) -> WorkerReply | None:
    # A process without a handler sends {}.
    return WorkerReply.from_json(value) if value else None


_BATCH_READERS = {**Envelope.READERS, "events": events_from_json}
_COMMAND_READERS = {**Envelope.READERS, "command": Command.from_json}
_REPLY_READERS = {**Envelope.READERS, "reply": _reply_or_none}

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
    """Return the bus message in `data`, or raise MalformedMessage (nothing else)."""
    raw = _parse(data)
    if not isinstance(raw, dict):
        raise MalformedMessage(
            f"not a message object: {raw!r:.80}", kind="not an object"
        )
    if raw.get("v") != VERSION:
        raise MalformedMessage(
            f"version {raw.get('v')!r:.20} is not {VERSION}", kind="version"
        )
    kind = raw.get("kind")
    parse = _KINDS.get(kind) if isinstance(kind, str) else None
    if parse is None:
        raise MalformedMessage(f"unknown kind {raw.get('kind')!r:.40}", kind="kind")
    return parse(raw)


def _parse(data: Any) -> Any:
    """Return the JSON in `data`: bounded in size and depth, every number finite."""
    if not isinstance(data, bytes | bytearray | str):
        raise MalformedMessage(f"not text: {type(data).__name__}", kind="not JSON")
    if len(data) > MAX_MESSAGE_CHARS:
        raise MalformedMessage(f"{len(data)} characters long", kind="too large")
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        raw = _DECODER.decode(text)
    except RecursionError:
        raise MalformedMessage("nested too deeply to parse", kind="too deep") from None
    except MalformedMessage:
        raise
    except (TypeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedMessage(f"not JSON: {exc!s:.200}", kind="not JSON") from None
    # Nesting is bounded by the readers: event arguments' own bound, and
    # MAX_DEPTH for free-form objects (`_object`).
    return raw


def _no_constant(name: str) -> float:
    # NaN, Infinity, -Infinity: Python's JSON reads them, no metric may.
    raise MalformedMessage(f"{name} is not a number", kind="not finite")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise MalformedMessage(f"{text:.40} is not finite", kind="not finite")
    return number


#: One decoder for every message (`json.loads` with hooks builds one a call).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _depth_over(raw: Any, limit: int) -> bool:
    """Return whether arrays and objects in `raw` nest deeper than `limit`."""
    level: list[Any] = [raw]  # the nodes `limit` containers deep, at the end
    for _ in range(limit):
        level = [
            child
            for node in level
            if isinstance(node, list | dict)
            for child in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return False
    return any(isinstance(node, list | dict) for node in level)


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


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficFigures:
    """A worker's traffic over its last minute, from counters it keeps anyway.

    `window_seconds` is the span the figures cover: a minute once the worker
    has run one, less before. None: nothing to measure yet (no span, or no
    turn in it for the p99).
    """

    window_seconds: float = 0.0
    messages: int = 0
    messages_per_second: float | None = None
    turns: int = 0
    turn_p99_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the figures as one flat object."""
        return _encode_fields(self)

    @classmethod
    def from_json(cls, data: Any) -> TrafficFigures:
        """Return the figures in `data`, or raise MalformedMessage."""
        return cls(**_decode_fields(cls, data))


def _cache_stats_map(value: Any) -> dict[str, CacheStats]:
    return {str(k): CacheStats.from_json(v) for k, v in _object(value).items()}


def _memory(value: Any) -> MemoryFigures | None:
    return MemoryFigures.from_json(value) if value else None


def _traffic(value: Any) -> TrafficFigures | None:
    return TrafficFigures.from_json(value) if value else None


def _names(value: Any) -> tuple[str, ...]:
    _check(isinstance(value, list | tuple), value, "an array")
    _check(len(value) <= MAX_NAME, len(value), f"at most {MAX_NAME} items")
    return tuple(_name(item) for item in value)


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
    #: Messages per second and turn p99 over the last minute (None: no pipeline).
    traffic: TrafficFigures | None = None
    #: The readiness probe's verdict (None: the worker serves no probes,
    #: METRICS_PORT unset), and the checks that fail.
    ready: bool | None = None
    not_ready: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the snapshot as JSON-ready data (memory and traffic {} when unknown)."""
        data = _encode_fields(self)
        data["memory"] = {} if self.memory is None else self.memory.to_json()
        data["traffic"] = {} if self.traffic is None else self.traffic.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> WorkerSnapshot:
        """Return the snapshot in `data`, or raise MalformedMessage."""
        readers = {
            "caches": _cache_stats_map,
            "memory": _memory,
            "traffic": _traffic,
            "not_ready": _names,
        }
        return cls(**_decode_fields(cls, data, readers=readers))

    def published(self, at: float | None = None) -> WorkerSnapshot:
        """Return this snapshot stamped as published at `at` (default: now)."""
        return replace(self, published_at=time.time() if at is None else at)
