"""StmMessage: a compact value that reads, compares and pickles as the dataclass did."""

from __future__ import annotations

import pickle
import random
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta, timezone

import pytest

from caches.layers.short_term_memory import StmMessage


def _fresh(text: str) -> str:
    """Return an equal string that is a distinct object (as parsed JSON gives)."""
    copy = "".join(list(text))
    assert copy == text and copy is not text
    return copy


def test_fields_read_back_as_given() -> None:
    sent = datetime(2026, 12, 2, 16, 40, 35, 75969, tzinfo=UTC)
    message = StmMessage("assistant", "hello", sent, speaker="Tomori")
    assert (message.role, message.content, message.speaker) == (
        "assistant",
        "hello",
        "Tomori",
    )
    assert message.timestamp == sent and message.timestamp.tzinfo is UTC
    assert StmMessage("user", "x", sent).speaker is None


def test_utc_timestamps_round_trip_to_the_microsecond() -> None:
    rng = random.Random(17)
    start = datetime(2015, 1, 1, tzinfo=UTC)
    for _ in range(20_000):
        sent = start + timedelta(microseconds=rng.randrange(30 * 365 * 86_400 * 10**6))
        assert StmMessage("user", "x", sent).timestamp == sent


def test_other_time_zones_are_kept_as_given() -> None:
    sent = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=9)))
    assert StmMessage("user", "x", sent).timestamp.tzinfo is sent.tzinfo
    naive = datetime(2026, 1, 2, 3, 4, 5, 6)
    assert StmMessage("user", "x", naive).timestamp == naive


def test_speakers_and_roles_are_shared_objects() -> None:
    sent = datetime.now(UTC)
    first = StmMessage(_fresh("user"), "a", sent, speaker=_fresh("Alice Liddell"))
    second = StmMessage(_fresh("user"), "b", sent, speaker=_fresh("Alice Liddell"))
    assert first.speaker is second.speaker
    assert first.role is second.role


def test_equality_hash_and_pickle_follow_the_four_fields() -> None:
    sent = datetime.now(UTC)
    one = StmMessage("user", "hi", sent, speaker="Bob")
    same = StmMessage("user", _fresh("hi"), sent, speaker="Bob")
    assert one == same and hash(one) == hash(same) and len({one, same}) == 1
    assert one != StmMessage("user", "hi", sent + timedelta(microseconds=1), "Bob")
    assert one != StmMessage("assistant", "hi", sent, speaker="Bob")
    assert pickle.loads(pickle.dumps(one)) == one
    assert "content='hi'" in repr(one) and "speaker='Bob'" in repr(one)


def test_messages_are_immutable() -> None:
    message = StmMessage("user", "hi", datetime.now(UTC))
    with pytest.raises(FrozenInstanceError):
        message.content = "changed"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del message.role
    with pytest.raises(AttributeError):
        message.extra = 1  # type: ignore[attr-defined]
