"""Helpers for the short-term memory tests."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from caches.layers import short_term_memory as stm
from tomori.domain.models import ShortTermMemoryRecord

db = pytest.mark.django_db(transaction=True)


def message(content: str, role: str = "user") -> stm.StmMessage:
    """Return a message written now."""
    return stm.StmMessage(role=role, content=content, timestamp=timezone.now())


async def remember(
    user: int,
    server: int | None,
    channel: int,
    *contents: str,
    persona_id: int | None = None,
    persona_lineage: Sequence[int] = (),
) -> stm.ShortTermMemoryEntry:
    """Store `contents` as a channel's latest messages through the public API."""
    return await stm.store_short_term_memory(
        user_disc_id=user,
        channel_disc_id=channel,
        server_disc_id=server,
        messages=[message(c) for c in contents],
        persona_id=persona_id,
        persona_lineage=persona_lineage,
    )


@sync_to_async
def durable_rows() -> list[ShortTermMemoryRecord]:
    """Return every durable row."""
    return list(ShortTermMemoryRecord.objects.order_by("cache_key"))


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[object]:
    """Count the calls of repository function `name` (its arguments, in order)."""
    from tomori.domain.repositories import memory as repo

    calls: list[object] = []
    real = getattr(repo, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(repo, name, counted)
    return calls
