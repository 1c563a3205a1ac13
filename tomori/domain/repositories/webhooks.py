"""Reads and writes of the managed (shared, per-channel) webhook rows.

Rows hold only ciphertext; encryption lives in `tomori.domain.crypto` and the cache
layer (`caches.layers.webhook`) decides when to decrypt, rotate or delete.
ManagedWebhook feeds the webhook cache, so every write here invalidates that
channel's entries after commit (see caches.invalidation).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count

from tomori.domain.models import ManagedWebhook


@dataclass(frozen=True, slots=True)
class StoredWebhook:
    """A managed webhook row as the cache layer needs it (ciphertext only)."""

    row_id: int
    channel_disc_id: int
    webhook_disc_id: int
    token_ciphertext: str
    key_version: int


def _to_stored(row: ManagedWebhook) -> StoredWebhook:
    return StoredWebhook(
        row_id=row.pk,
        channel_disc_id=row.channel_disc_id,
        webhook_disc_id=row.webhook_disc_id,
        token_ciphertext=row.token_ciphertext,
        key_version=row.key_version,
    )


def get_managed_webhook(channel_disc_id: int) -> StoredWebhook | None:
    """Return the stored webhook of a channel, or None."""
    row = ManagedWebhook.objects.filter(channel_disc_id=channel_disc_id).first()
    return _to_stored(row) if row else None


def save_managed_webhook(
    *,
    channel_disc_id: int,
    webhook_disc_id: int,
    token_ciphertext: str,
    key_version: int,
    server_id: int | None = None,
) -> StoredWebhook:
    """Create or replace the channel's webhook row."""
    with transaction.atomic():
        # A webhook id is unique: if Discord moved it to this channel, the
        # row of its old channel is wrong now.
        ManagedWebhook.objects.filter(webhook_disc_id=webhook_disc_id).exclude(
            channel_disc_id=channel_disc_id
        ).delete()
        row, _ = ManagedWebhook.objects.update_or_create(
            channel_disc_id=channel_disc_id,
            defaults={
                "webhook_disc_id": webhook_disc_id,
                "token_ciphertext": token_ciphertext,
                "key_version": key_version,
                "server_id": server_id,
            },
        )
    return _to_stored(row)


def replace_webhook_ciphertext(
    stored: StoredWebhook, *, token_ciphertext: str, key_version: int
) -> bool:
    """Store re-encrypted ciphertext if the row still holds `stored`'s; say if so."""
    # Conditional on the old ciphertext so two workers rotating the same row,
    # or a rotation racing a replacement webhook, cannot clobber each other.
    updated = ManagedWebhook.objects.filter(
        pk=stored.row_id, token_ciphertext=stored.token_ciphertext
    ).update(token_ciphertext=token_ciphertext, key_version=key_version)
    return updated == 1


def count_webhooks_by_key_version(*, exclude: Iterable[int] = ()) -> dict[int, int]:
    """Return {key version: rows} of the stored webhooks, leaving out `exclude`."""
    rows = (
        ManagedWebhook.objects.exclude(key_version__in=list(exclude))
        .values_list("key_version")
        .annotate(rows=Count("pk"))
        .order_by("key_version")
    )
    return {int(version): int(count) for version, count in rows}


def delete_managed_webhook(
    channel_disc_id: int, *, webhook_disc_id: int | None = None
) -> int:
    """Delete the channel's webhook row (only if it is `webhook_disc_id`, if given)."""
    rows = ManagedWebhook.objects.filter(channel_disc_id=channel_disc_id)
    if webhook_disc_id is not None:
        rows = rows.filter(webhook_disc_id=webhook_disc_id)
    deleted, _ = rows.delete()
    return deleted
