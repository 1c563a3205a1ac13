"""Bus message format: versioned JSON envelopes for invalidations, commands and replies."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

VERSION = 1
INVALIDATE = "invalidate"
COMMAND = "command"
REPLY = "reply"
KINDS = frozenset({INVALIDATE, COMMAND, REPLY})
#: Replies to command <id> are pushed on the Redis list REPLY_PREFIX + <id>.
REPLY_PREFIX = "tomori:reply:"

EventTuple = tuple[str, str, tuple[Any, ...]]


def envelope(
    kind: str, *, origin: str, seq: int, sent_at: float | None = None, **body: Any
) -> dict[str, Any]:
    """Return a message of `kind` from `origin` with sequence number `seq`."""
    sent = time.time() if sent_at is None else sent_at
    return {
        "v": VERSION,
        "origin": origin,
        "seq": seq,
        "sent_at": sent,
        "kind": kind,
        **body,
    }


def encode(message: dict[str, Any]) -> str:
    """Return `message` as compact JSON."""
    return json.dumps(message, separators=(",", ":"))


def decode(data: bytes | str) -> dict[str, Any] | None:
    """Return the message in `data`, or None when it is not a valid version-1 message."""
    try:
        message = json.loads(data)
    except (TypeError, ValueError):
        return None
    if not isinstance(message, dict) or message.get("v") != VERSION:
        return None
    valid = (
        isinstance(message.get("origin"), str)
        and isinstance(message.get("seq"), int)
        and isinstance(message.get("sent_at"), int | float)
        and message.get("kind") in KINDS
    )
    return message if valid else None


def events_to_json(events: Iterable[EventTuple]) -> list[list[Any]]:
    """Return events as JSON-ready [cache, op, [args...]] triples."""
    return [[name, op, list(args)] for name, op, args in events]


def events_from_json(raw: Any) -> list[EventTuple]:
    """Return the events of a message; JSON arrays in args become tuples again."""
    if not isinstance(raw, list):
        return []
    events = []
    for item in raw:
        if isinstance(item, list) and len(item) == 3 and isinstance(item[2], list):
            events.append((str(item[0]), str(item[1]), _tuples(item[2])))
    return events


def _tuples(value: Any) -> Any:
    # Cache keys such as (server_id, channel_disc_id) travel as arrays.
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value
