"""Hostile or broken bus messages: refused in one bounded line, counted, never a crash or a poisoned metric."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caches import bus
from caches.messages import (
    VERSION,
    BusMessage,
    InvalidationBatch,
    MalformedMessage,
    decode,
    encode,
)
from caches.registry import registry

#: No log line, formatted as the console prints it, is longer than this.
MAX_LINE = 2048
_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


class Lines(logging.Handler):
    """Every log record, formatted as the console prints it (traceback included)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(_FORMAT.format(record))

    def too_long(self) -> list[str]:
        return [line[:200] for line in self.lines if len(line) > MAX_LINE]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


class Receiver(bus.Bus):
    """A bus that applies what its Redis transport receives to the real registry.

    Nothing is subscribed: the test hands the transport each message as its
    subscriber thread would (and nothing is published: Redis is a closed port).
    """

    def __init__(self) -> None:
        super().__init__(redis_url="redis://127.0.0.1:1/0", channel="tomori:test:x")

    def receive(self, data: Any) -> None:
        assert self._redis is not None
        self._redis._on_message(data)  # what the subscriber thread calls

    def close(self, *, drain_timeout: float = 0.0) -> None:
        super().close(drain_timeout=drain_timeout)


def _receiver() -> Receiver:
    return Receiver()


def _assert_metrics_finite(receiver: Receiver) -> None:
    buckets, total = receiver.stats.lag_histogram()
    assert math.isfinite(total)
    lag = receiver.snapshot()["lag"]
    for name in ("p50_ms", "p99_ms", "max_ms"):
        assert lag[name] is None or math.isfinite(lag[name])


# ------------------------------------------------------------------ generated garbage

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities too
    | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=30,
)
_names = st.sampled_from(["user", "tomori_state", "personas", "no_such_cache", ""])
_ops = st.sampled_from(["key", "all", "server", "no_such_op", "channel", ""])
_events = st.lists(
    st.tuples(_names | st.text(max_size=20), _ops | st.text(max_size=20), _json),
    max_size=5,
)
_envelopes = st.fixed_dictionaries(
    {
        "v": st.just(VERSION) | _json,
        "kind": st.sampled_from(["invalidate", "command", "reply"]) | _json,
    },
    optional={
        "origin": st.text(max_size=30) | _json,
        "seq": st.integers() | _json,
        "sent_at": st.floats() | _json,
        "events": st.builds(lambda e: [list(x) for x in e], _events) | _json,
        "outbox": st.lists(st.integers()) | _json,
        "id": _json,
        "reply_to": st.just("tomori:reply:x") | _json,
        "timeout": st.floats() | _json,
        "command": _json,
        "handled": _json,
        "reply": _json,
    },
)
_wire = (
    st.binary(max_size=200)
    | st.text(max_size=200)
    | _json.map(lambda v: json.dumps(v))
    | _envelopes.map(lambda v: json.dumps(v))
)


def _decoded_or_refused(data: Any) -> BusMessage | None:
    try:
        return decode(data)
    except MalformedMessage:
        return None


@settings(max_examples=400, deadline=None)
@given(_wire)
def test_decode_returns_a_message_or_refuses_it_and_nothing_else(data: Any) -> None:
    message = _decoded_or_refused(data)
    if isinstance(message, InvalidationBatch):
        assert math.isfinite(message.sent_at) and message.seq >= 0
        assert all(
            len(name) <= 200 and len(op) <= 200 for name, op, _ in message.events
        )


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.lists(_wire, min_size=1, max_size=5))
def test_the_receiver_survives_garbage_with_finite_metrics_and_short_lines(
    data: list[Any], lines: Lines
) -> None:
    receiver = _receiver()
    try:
        for item in data:
            receiver.receive(item)
        _assert_metrics_finite(receiver)
    finally:
        receiver.close()
    assert lines.too_long() == []


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(events=_events, sent_at=st.floats(), seq=st.integers(0, 10))
def test_the_applier_survives_any_well_formed_batch(
    events: list[tuple[str, str, Any]], sent_at: float, seq: int, lines: Lines
) -> None:
    receiver = _receiver()
    batch = {
        "v": VERSION,
        "kind": "invalidate",
        "origin": "hostile:1",
        "seq": seq,
        "sent_at": sent_at,
        "events": [
            [name, op, args if isinstance(args, list) else [args]]
            for name, op, args in events
        ],
    }
    try:
        receiver.receive(json.dumps(batch))
        _assert_metrics_finite(receiver)
    finally:
        receiver.close()
    assert lines.too_long() == []


# ------------------------------------------------------------------ what was found


def _batch(**fields: Any) -> dict[str, Any]:
    return {
        "v": VERSION,
        "kind": "invalidate",
        "origin": "hostile:1",
        "seq": 1,
        "sent_at": 1.7e9,
        "events": [["user", "key", [5]]],
        **fields,
    }


def _deep(levels: int) -> str:
    batch = '{"v": 1, "kind": "invalidate", "origin": "o", "seq": 1, "sent_at": 1.0'
    return batch + ', "events": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (json.dumps(_batch(sent_at=float("nan"))), "not finite"),
        (
            '{"v":1,"kind":"invalidate","origin":"o","seq":1,"sent_at":1e999}',
            "not finite",
        ),
        (
            json.dumps(_batch(events=[["user", "key", ["k" * 5_000_000]]])),
            "InvalidationBatch.events",
        ),
        (_deep(100_000), "too deep"),
        (_deep(40), "InvalidationBatch.events"),
        (json.dumps(_batch(seq=-1)), "InvalidationBatch.seq"),
        (json.dumps(_batch(seq=2**70)), "InvalidationBatch.seq"),
        (json.dumps(_batch(origin="o" * 10_000)), "InvalidationBatch.origin"),
        (json.dumps(_batch(sent_at=-5.0)), "InvalidationBatch.sent_at"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_each_found_message_is_refused_counted_and_logged_once_in_a_short_line(
    data: Any, kind: str, lines: Lines
) -> None:
    with pytest.raises(MalformedMessage) as refused:
        decode(data)
    assert refused.value.kind == kind
    receiver = _receiver()
    try:
        for _ in range(3):
            receiver.receive(data)
        assert receiver.snapshot()["rejected"] == 3
        _assert_metrics_finite(receiver)
    finally:
        receiver.close()
    said = [line for line in lines.lines if "dropped a malformed message" in line]
    assert len(said) == 1 and kind in said[0], said
    assert lines.too_long() == []
    assert not any("Traceback" in line for line in lines.lines)


def test_a_nan_lag_never_reaches_the_histogram() -> None:
    receiver = _receiver()
    try:
        receiver.stats.applied(float("nan"))
        receiver.stats.applied(float("inf"))
        _assert_metrics_finite(receiver)
        assert receiver.stats.lag_histogram()[1] == 0.0
    finally:
        receiver.close()


def test_a_long_key_from_a_good_sender_is_logged_in_a_short_line(lines: Lines) -> None:
    registry.get("user")  # the layer exists: the event is applied
    receiver = _receiver()
    long_key = "k" * 1_000  # the longest argument a message may carry
    message = InvalidationBatch(
        origin="other:1",
        seq=1,
        sent_at=1.7e9,
        events=(("user", "key", (long_key,)),) * 50,
    )
    try:
        receiver.receive(encode(message))
        assert receiver.snapshot()["applied"] == 1
    finally:
        receiver.close()
    assert any("invalidated from other:1" in line for line in lines.lines)
    assert lines.too_long() == []
