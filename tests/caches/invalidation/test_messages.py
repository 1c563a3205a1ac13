"""Messages between processes: every kind survives its JSON form, malformed data is refused."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caches.messages import (
    COMMANDS,
    REPLY_PREFIX,
    CacheStats,
    ClearAll,
    ClearCache,
    Command,
    CommandMessage,
    EmergencyClear,
    InvalidateKey,
    InvalidationBatch,
    MalformedMessage,
    MemoryFigures,
    OnWorker,
    RefreshCatalogs,
    ReplyMessage,
    TrafficFigures,
    WorkerReply,
    WorkerSnapshot,
    decode,
    encode,
    events_from_json,
    iter_events_text,
)

COMMAND_CASES = [
    ClearCache.issue(cache="user", issued_by="ops"),
    InvalidateKey.issue(cache="channel_prompt", key="4:5", issued_by="ops"),
    ClearAll.issue(issued_by="ops"),
    EmergencyClear.issue(include_short_term_memory=None, issued_by="ops"),
    EmergencyClear.issue(include_short_term_memory=True, issued_by="ops"),
    RefreshCatalogs.issue(fresh=True, issued_by="ops"),
    OnWorker.issue(
        worker_id="host:1:shard3",
        command=EmergencyClear.issue(include_short_term_memory=True, issued_by="ops"),
        issued_by="ops",
    ),
]


def _wire(message: Any) -> Any:
    """Return `message` as a receiver sees it: JSON text parsed back."""
    return json.loads(json.dumps(message.to_json()))


def test_every_command_kind_has_a_case():
    assert {type(command) for command in COMMAND_CASES} == set(COMMANDS.values())


def test_an_invalidation_batch_round_trips_with_tuple_keys():
    batch = InvalidationBatch(
        origin="o",
        seq=3,
        sent_at=1.5,
        events=(("channel_prompt", "key", ((4, 5),)), ("llm", "reload", ())),
        outbox=(7, 8),
    )
    assert decode(encode(batch)) == batch
    data = _wire(batch)
    assert data["v"] == 1 and data["kind"] == "invalidate"
    assert data["events"] == [
        ["channel_prompt", "key", [[4, 5]]],
        ["llm", "reload", []],
    ]


@pytest.mark.parametrize("command", COMMAND_CASES, ids=lambda c: c.op)
def test_commands_round_trip_inside_their_envelope(command: Command):
    message = CommandMessage(
        origin="admin",
        seq=0,
        sent_at=2.0,
        id="x",
        reply_to=REPLY_PREFIX + "x",
        timeout=3.0,
        command=command,  # type: ignore[arg-type]
    )
    assert decode(encode(message)) == message
    assert _wire(command)["op"] == command.op


def test_the_command_wire_keeps_its_field_names():
    command = InvalidateKey.issue(cache="user", key="7:8", issued_by="ops")
    assert set(_wire(command)) == {"id", "op", "cache", "key", "issued_by", "issued_at"}


def test_a_command_for_one_worker_carries_the_command_whole():
    inner = InvalidateKey.issue(cache="user", key="7", issued_by="ops")
    command = OnWorker.issue(worker_id="w3", command=inner, issued_by="ops")
    data = _wire(command)
    assert data["op"] == "on_worker" and data["worker_id"] == "w3"
    assert data["command"] == _wire(inner)
    assert Command.from_json(data) == command


@pytest.mark.parametrize(
    "change",
    [
        {"command": None},  # nothing to run
        {"command": {"op": "format_disk"}},
        {"worker_id": 7},
        {"worker_id": "w" * 201},  # past the bus's name bound
    ],
)
def test_a_malformed_command_for_one_worker_is_refused(change: dict[str, Any]):
    inner = ClearAll.issue(issued_by="ops")
    data = {**_wire(OnWorker.issue(worker_id="w3", command=inner, issued_by="o"))}
    data.update(change)
    with pytest.raises(MalformedMessage):
        Command.from_json(data)


def test_a_command_for_one_worker_cannot_carry_another():
    inner = OnWorker.issue(
        worker_id="w1", command=ClearAll.issue(issued_by="o"), issued_by="o"
    )
    data = _wire(inner)
    data = {**data, "command": _wire(inner)}
    with pytest.raises(MalformedMessage, match="cannot carry another"):
        Command.from_json(data)


def test_replies_round_trip_handled_or_not():
    reply = WorkerReply(
        worker_id="w1",
        ok=True,
        command_id="x",
        op="clear_all",
        shard_ids=(0, 1),
        removed=12,
        duration_ms=0.5,
        details={"cleared": {"user": 12}},
        origin="w1:1:abc",
    )
    for message in (
        ReplyMessage(origin="w", seq=1, sent_at=3.0, id="x", handled=True, reply=reply),
        ReplyMessage(origin="w", seq=2, sent_at=3.0, id="x", handled=False),
    ):
        assert decode(encode(message)) == message


def test_a_reply_from_an_older_handler_error_parses_with_defaults():
    # What a handler that raised produced before replies were typed.
    old = {"ok": False, "error": "ValueError: boom", "worker_id": "w1", "origin": "o"}
    reply = WorkerReply.from_json(old)
    assert reply.ok is False and reply.removed == 0 and reply.command_id is None


def _snapshot() -> WorkerSnapshot:
    return WorkerSnapshot(
        worker_id="w1",
        shard_ids=(0,),
        shard_count=2,
        published_at=10.0,
        started_at=1.0,
        caches={
            "user": CacheStats(
                size=3,
                cap=100,
                ttl=60.0,
                hits=5,
                policy="clear",
                member_caps={"primary": 100},
                members={"primary": 3},
                extra={"in_flight": 0, "name": "user"},
            )
        },
        discord={"discord_members": 4},
        memory=MemoryFigures(
            rss_mb=120.5, limit_mb=512.0, percent=23.5, extra={"gc_gen0_count": 3}
        ),
        bus={"mode": "redis", "lag": {"p50_ms": 1.0}},
        catalogs={"models": {"ready": True}},
        recent_turns=({"outcome": "ok"},),
        consistency={"user": {"checked": 1}},
    )


def test_a_worker_snapshot_round_trips_and_keeps_extra_figures_flat():
    snapshot = _snapshot()
    data = _wire(snapshot)
    assert WorkerSnapshot.from_json(data) == snapshot
    assert data["caches"]["user"]["in_flight"] == 0  # flat, as the registry gives it
    assert data["memory"]["gc_gen0_count"] == 3


def test_a_snapshot_without_memory_figures_sends_an_empty_object():
    snapshot = WorkerSnapshot(worker_id="w1")
    assert _wire(snapshot)["memory"] == {}
    assert WorkerSnapshot.from_json(_wire(snapshot)) == snapshot


def test_traffic_and_readiness_round_trip_and_an_older_worker_has_none():
    snapshot = dataclasses.replace(
        _snapshot(),
        traffic=TrafficFigures(
            window_seconds=60.0,
            messages=120,
            messages_per_second=2.0,
            turns=100,
            turn_p99_ms=4.5,
        ),
        ready=False,
        not_ready=("gateway_connected",),
    )
    assert WorkerSnapshot.from_json(_wire(snapshot)) == snapshot
    older = _wire(_snapshot())
    for name in ("traffic", "ready", "not_ready"):
        older.pop(name)
    parsed = WorkerSnapshot.from_json(older)
    assert (parsed.traffic, parsed.ready, parsed.not_ready) == (None, None, ())


def test_fields_a_newer_sender_adds_are_ignored():
    data = _wire(_snapshot())
    data["future_field"] = {"anything": 1}
    assert WorkerSnapshot.from_json(data) == _snapshot()


def _command_data(**changes: Any) -> bytes:
    message = CommandMessage(
        origin="a",
        seq=0,
        sent_at=1.0,
        id="x",
        reply_to=REPLY_PREFIX + "x",
        timeout=3.0,
        command=ClearCache.issue(cache="user", issued_by="ops"),
    ).to_json()
    message.update(changes)
    return json.dumps(message).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"v": 2, "origin": "o", "seq": 1, "sent_at": 1.0, "kind": "invalidate"}',
        b'{"v": 1, "origin": "o", "seq": "1", "sent_at": 1.0, "kind": "invalidate"}',
        b'{"v": 1, "origin": "o", "seq": true, "sent_at": 1.0, "kind": "invalidate"}',
        b'{"v": 1, "origin": "o", "seq": 1, "sent_at": 1.0, "kind": "other"}',
        b'{"v": 1, "origin": "o", "seq": 1, "kind": "invalidate"}',
        b'{"v": 1, "origin": "o", "seq": 1, "sent_at": 1, "kind": "invalidate",'
        b' "events": [["user", "key"]]}',
        b'{"v": 1, "origin": "o", "seq": 1, "sent_at": 1, "kind": "invalidate",'
        b' "events": [["user", "key", [{"a": 1}]]]}',
        b'{"v": 1, "origin": "o", "seq": 1, "sent_at": 1, "kind": "invalidate",'
        b' "outbox": ["7"]}',
        _command_data(reply_to="elsewhere"),
        _command_data(command={"op": "format_disk", "id": "x"}),
        _command_data(command={"op": "clear_cache", "id": "x", "issued_by": "o"}),
        b'{"v": 1, "origin": "o", "seq": 1, "sent_at": 1, "kind": "reply",'
        b' "handled": true, "reply": {"ok": true}}',
    ],
)
def test_malformed_bus_messages_are_refused(data: bytes):
    with pytest.raises(MalformedMessage):
        decode(data)


@pytest.mark.parametrize(
    "change",
    [
        {"worker_id": None},
        {"caches": {"user": {"hits": 1}}},  # no size
        {"caches": {"user": {"size": "3"}}},
        {"memory": {"rss_mb": "big"}},
        {"shard_ids": [0, "1"]},
        {"recent_turns": ["ok"]},
        {"traffic": {"messages_per_second": "fast"}},
        {"traffic": {"turn_p99_ms": float("nan")}},
        {"not_ready": "gateway_connected"},
        {"not_ready": ["x" * 201]},
        {"ready": "yes"},
    ],
)
def test_malformed_snapshots_are_refused(change: dict[str, Any]):
    data = {**_wire(_snapshot()), **change}
    with pytest.raises(MalformedMessage):
        WorkerSnapshot.from_json(data)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=20,
)
_event_like = st.lists(
    st.one_of(
        st.tuples(
            st.text(max_size=3), st.text(max_size=3), st.lists(_json, max_size=3)
        ).map(list),
        _json,
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(value=_event_like | _json, spaces=st.sampled_from(["", " ", "\n\t "]))
def test_events_parsed_from_text_one_by_one_are_those_of_the_whole_array(
    value: Any, spaces: str
) -> None:
    """`iter_events_text` (an outbox row, parsed as a worker takes it) agrees with
    `events_from_json(json.loads(...))` on every JSON value: the same events, or both refuse."""
    text = spaces + json.dumps(value, indent=1 if spaces else None) + spaces
    try:
        whole: Any = events_from_json(json.loads(text))
    except MalformedMessage:
        whole = MalformedMessage
    try:
        stepped: Any = tuple(iter_events_text(text))
    except MalformedMessage:
        stepped = MalformedMessage
    assert stepped == whole
