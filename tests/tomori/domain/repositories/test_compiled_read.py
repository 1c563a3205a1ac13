"""CompiledRead: the ORM's query and rows, compiled once per thread."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from tomori.domain.models import ShortTermMemoryRecord, User
from tomori.domain.repositories import compiled, memory, users
from tomori.domain.repositories.compiled import CompiledRead

pytestmark = pytest.mark.django_db


def test_rows_are_what_the_orm_returns_for_each_value() -> None:
    made = [
        User.objects.create(user_disc_id=10 + i, username=f"u{i}") for i in range(3)
    ]
    read = CompiledRead(
        lambda disc_id, name: User.objects.filter(
            user_disc_id=disc_id, username=name
        ).values_list("pk", "user_disc_id", "username"),
        (int, str),
    )
    for user in made:
        assert read.rows(user.user_disc_id, user.username) == [
            [user.pk, user.user_disc_id, user.username]
        ]
    assert read.rows(10, "someone else") == []


def test_it_compiles_once_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = []
    real = CompiledRead._compile

    def counted(self: CompiledRead) -> object:
        compiled.append(threading.get_ident())
        return real(self)

    monkeypatch.setattr(CompiledRead, "_compile", counted)
    read = CompiledRead(
        lambda disc_id: User.objects.filter(user_disc_id=disc_id).values_list("pk"),
        (int,),
    )
    for disc_id in range(5):
        read.rows(disc_id)
    assert len(compiled) == 1


def test_columns_are_converted_as_the_orm_converts_them() -> None:
    now = timezone.now()
    ShortTermMemoryRecord.objects.create(
        cache_key="shortterm:user:1:2",
        scope="user",
        user_disc_id=1,
        channel_disc_id=2,
        categories=["a", "b"],
        turn_count=3,
        updated_at=now,
    )
    record = memory.get_memory_record(
        "shortterm:user:1:2", updated_since=now - timedelta(hours=1)
    )
    assert record is not None
    assert (record.categories, record.turn_count, record.updated_at) == (
        ("a", "b"),
        3,
        now,
    )
    assert record.updated_at.tzinfo is not None
    assert (
        memory.get_memory_record(
            "shortterm:user:1:2", updated_since=now + timedelta(seconds=1)
        )
        is None
    )
    user = User.objects.create(user_disc_id=77, username="ana", language="fr")
    assert users.get_user_by_disc_id(77) == users.user_record(user)
    assert users.get_user_by_disc_id(78) is None


def test_values_other_than_ints_and_strings_are_refused() -> None:
    with pytest.raises(TypeError):
        CompiledRead(lambda when: User.objects.filter(created_at=when), (object,))
    not_bound_as_itself = CompiledRead(
        lambda disc_id: User.objects.filter(user_disc_id__gt=disc_id + 1), (int,)
    )
    with pytest.raises(ValueError, match="not bound as itself"):
        not_bound_as_itself.rows(5)
    assert compiled._INT_PROBE > 2**62  # far from any snowflake in a test


def _stored(cache_key: str, updated_at: object, turns: int = 1) -> None:
    ShortTermMemoryRecord.objects.create(
        cache_key=cache_key,
        scope="user",
        user_disc_id=1,
        channel_disc_id=2,
        categories=["c"],
        turn_count=turns,
        updated_at=updated_at,
    )


def test_records_of_many_keys_are_one_query_of_a_few_compiled_sizes(
    django_assert_num_queries: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = timezone.now()
    for i in range(6):
        _stored(f"k{i}", now, turns=i)
    _stored("old", now - timedelta(hours=3))
    compiled_sizes = []
    real = CompiledRead._compile

    def counted(self: CompiledRead) -> object:
        compiled_sizes.append(len(self._kinds))
        return real(self)

    monkeypatch.setattr(CompiledRead, "_compile", counted)
    memory._records_by_keys.cache_clear()
    since = now - timedelta(hours=1)
    asked = ["k0", "k2", "missing", "old", "k5", "k2"]  # a repeat, an absent, a stale

    with django_assert_num_queries(1):  # type: ignore[operator]
        records = memory.get_memory_records(asked, updated_since=since)
    for count in (5, 7, 8, 3):  # 5 keys, 7, 8 -> size 8; 3 -> size 4
        memory.get_memory_records(
            [f"k{i % 6}x" for i in range(count)], updated_since=since
        )

    assert sorted(records) == ["k0", "k2", "k5"]  # "old" is before the window
    assert records["k5"].turn_count == 5 and records["k5"].categories == ("c",)
    assert records["k2"] == memory.get_memory_record("k2", updated_since=since)
    assert sorted(compiled_sizes) == [4, 8]  # the first call's 5 keys: 8 too


def test_records_past_a_chunk_take_a_query_each(
    django_assert_num_queries: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = timezone.now()
    _stored("first", now)
    _stored("last", now)
    monkeypatch.setattr(memory, "RECORDS_CHUNK", 4)
    keys = ["first", *(f"none{i}" for i in range(8)), "last"]  # 10 keys: 4 + 4 + 2

    with django_assert_num_queries(3):  # type: ignore[operator]
        records = memory.get_memory_records(keys, updated_since=now)

    assert sorted(records) == ["first", "last"]
    assert memory.get_memory_records([], updated_since=now) == {}
