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


def test_an_in_lookup_compiles_at_one_list_length() -> None:
    for disc_id in (11, 12, 13):
        User.objects.create(user_disc_id=disc_id, username=f"u{disc_id}")
    three = CompiledRead(
        lambda *ids: (
            User.objects.filter(user_disc_id__in=ids)
            .order_by("user_disc_id")
            .values_list("user_disc_id", "username")
        ),
        (int,) * 3,
    )

    assert [tuple(row) for row in three.rows(11, 13, 99)] == [(11, "u11"), (13, "u13")]
    assert [tuple(row) for row in three.rows(12, 12, 12)] == [(12, "u12")]
