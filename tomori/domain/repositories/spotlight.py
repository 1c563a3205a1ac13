"""Personal spotlights: the gate query, the status query, and writes."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from tomori.domain.models import PersonalSpotlight


@dataclass(frozen=True, slots=True)
class SpotlightRecord:
    """A user's active spotlight in a channel: the persona, until when.

    `expires_ts` is `expires_at` as POSIX seconds (None: open-ended), kept so
    that a cache hit checks the expiry against `time.time()` instead of
    building an aware datetime per read.
    """

    persona_id: int | None
    expires_at: datetime | None
    expires_ts: float | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        stamp = None if self.expires_at is None else self.expires_at.timestamp()
        object.__setattr__(self, "expires_ts", stamp)


def _unexpired(now: datetime) -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)


def server_has_personal_spotlights(server_id: int) -> bool:
    """Tell whether the server has any spotlight that has not expired."""
    return servers_with_personal_spotlights([server_id])[server_id]


def servers_with_personal_spotlights(server_ids: Collection[int]) -> dict[int, bool]:
    """Tell of each server whether it has a spotlight that has not expired (one query)."""
    having = set(
        PersonalSpotlight.objects.filter(server_id__in=list(server_ids))
        .filter(_unexpired(timezone.now()))
        .values_list("server_id", flat=True)
        .distinct()
    )
    return {server_id: server_id in having for server_id in server_ids}


def get_personal_spotlight_status(
    *, server_id: int, user_id: int, channel_disc_id: int
) -> SpotlightRecord | None:
    """Delete the server's expired spotlights, then return this triple's, or None.

    One query in the common case: the triple's row and the server's expired
    rows are read together, and the delete (the ORM's, as before: it
    invalidates what it removes) runs only when that read saw expired rows.
    """
    now = timezone.now()
    found: SpotlightRecord | None = None
    expired = False
    rows = PersonalSpotlight.objects.filter(
        Q(user_id=user_id, channel_disc_id=channel_disc_id) | Q(expires_at__lte=now),
        server_id=server_id,
    ).values_list("user_id", "channel_disc_id", "persona_id", "expires_at")
    for row_user, row_channel, persona_id, expires_at in rows:
        if expires_at is not None and expires_at <= now:
            expired = True  # the triple's own included: deleted, so not found
        elif row_user == user_id and row_channel == channel_disc_id:
            found = SpotlightRecord(persona_id=persona_id, expires_at=expires_at)
    if expired:
        PersonalSpotlight.objects.filter(
            server_id=server_id, expires_at__lte=now
        ).delete()
    return found


def personal_spotlight_set(
    *,
    server_id: int,
    user_id: int,
    channel_disc_id: int,
    persona_id: int | None,
    expires_at: datetime | None = None,
) -> SpotlightRecord:
    """Create or replace a user's spotlight in a channel."""
    row = PersonalSpotlight.objects.filter(
        server_id=server_id, user_id=user_id, channel_disc_id=channel_disc_id
    ).first() or PersonalSpotlight(
        server_id=server_id, user_id=user_id, channel_disc_id=channel_disc_id
    )
    row.persona_id = persona_id
    row.expires_at = expires_at
    row.save()
    return SpotlightRecord(persona_id=persona_id, expires_at=expires_at)


def personal_spotlight_remove(
    *, server_id: int, user_id: int, channel_disc_id: int
) -> bool:
    """Remove a user's spotlight in a channel; return whether there was one."""
    row = PersonalSpotlight.objects.filter(
        server_id=server_id, user_id=user_id, channel_disc_id=channel_disc_id
    ).first()
    if row is None:
        return False
    row.delete()
    return True
