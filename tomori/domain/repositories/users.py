"""Users, their privacy level and per-server blacklist: cache reads, and writes."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from sys import intern
from typing import Any

from tomori.domain.models import PrivacyLevel, User, UserBlacklist
from tomori.domain.repositories._fields import build, save_changes
from tomori.domain.repositories.compiled import CompiledRead

USER_FIELDS = ("username", "privacy_level", "language", "personal_memories_enabled")

#: What a missing user is treated as (the column's default).
DEFAULT_PRIVACY_LEVEL = PrivacyLevel.STANDARD
#: The most restrictive level, served when the database cannot be read.
MOST_RESTRICTIVE_PRIVACY_LEVEL = PrivacyLevel(max(PrivacyLevel.values))


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A user row as the caches see it."""

    id: int
    user_disc_id: int
    username: str
    privacy_level: int
    language: str
    personal_memories_enabled: bool


def user_record(user: User) -> UserRecord:
    """Return the immutable snapshot of a user row.

    The language code is interned: a few distinct codes across the tens of
    thousands of cached users, one string object each instead of one per row.
    """
    return UserRecord(
        id=user.pk,
        user_disc_id=user.user_disc_id,
        username=user.username,
        privacy_level=user.privacy_level,
        language=intern(user.language),
        personal_memories_enabled=user.personal_memories_enabled,
    )


#: A user miss's query, compiled once (see `compiled`): the columns of a UserRecord.
_USER_BY_DISC_ID = CompiledRead(
    lambda user_disc_id: (
        User.objects.filter(user_disc_id=user_disc_id)
        .order_by("pk")
        .values_list("pk", "user_disc_id", *USER_FIELDS)[:1]
    ),
    (int,),
)


def get_user_by_disc_id(user_disc_id: int) -> UserRecord | None:
    """Return the user with this Discord id, or None."""
    rows = _USER_BY_DISC_ID.rows(user_disc_id)
    if not rows:
        return None
    pk, disc_id, username, privacy_level, language, memories = rows[0]
    return UserRecord(
        id=pk,
        user_disc_id=disc_id,
        username=username,
        privacy_level=privacy_level,
        language=intern(language),
        personal_memories_enabled=memories,
    )


def get_users_by_disc_ids(
    user_disc_ids: Collection[int],
) -> dict[int, UserRecord | None]:
    """Return each of these Discord ids' user, None for those without a row (one query)."""
    found: dict[int, UserRecord | None] = dict.fromkeys(user_disc_ids)
    for user in User.objects.filter(user_disc_id__in=list(user_disc_ids)):
        found[user.user_disc_id] = user_record(user)
    return found


#: The blacklist of a server that lists nobody (most): one shared empty set.
NOBODY_BLACKLISTED: frozenset[int] = frozenset()


def blacklisted_users(server_disc_id: int) -> frozenset[int]:
    """Return the Discord ids of the users blacklisted in the server."""
    listed = frozenset(
        UserBlacklist.objects.filter(server__server_disc_id=server_disc_id).values_list(
            "user__user_disc_id", flat=True
        )
    )
    return listed or NOBODY_BLACKLISTED


# Writes.


def user_create(*, user_disc_id: int, **fields: Any) -> UserRecord:
    """Create a user row and return it."""
    user = build(User, USER_FIELDS, fields, user_disc_id=user_disc_id)
    user.save()
    return user_record(user)


def user_get_or_create(*, user_disc_id: int, username: str = "") -> UserRecord:
    """Return the user with this Discord id, creating the row if needed."""
    user, _ = User.objects.get_or_create(
        user_disc_id=user_disc_id, defaults={"username": username}
    )
    return user_record(user)


def user_update(*, user_id: int, **fields: Any) -> UserRecord:
    """Change a user's fields (username, privacy level, language, memories flag)."""
    user = User.objects.get(pk=user_id)
    save_changes(user, USER_FIELDS, fields)
    return user_record(user)


def user_blacklist_add(*, server_id: int, user_id: int, reason: str = "") -> bool:
    """Blacklist a user in a server; return whether a row was created."""
    _, created = UserBlacklist.objects.get_or_create(
        server_id=server_id, user_id=user_id, defaults={"reason": reason}
    )
    return created


def user_blacklist_remove(*, server_id: int, user_id: int) -> bool:
    """Lift a user's blacklist in a server; return whether a row was removed."""
    row = UserBlacklist.objects.filter(server_id=server_id, user_id=user_id).first()
    if row is None:
        return False
    row.delete()
    return True
