"""Webhook cache (spec 10): a channel's shared webhook and each persona's identity on it.

One bounded cache with no ttl holds three kinds of key:
- `channel_disc_id` (int) -> `WebhookHandle`, the channel's shared webhook;
- `"channel:persona"` (str) -> `PersonaWebhook`, that webhook plus the
  persona's name and avatar, invalidated when the persona changes;
- `("failed", channel_disc_id)` -> `WebhookFailure`, kept for
  WEBHOOK_FAILURE_CACHE_TTL_MINUTES so a channel where the bot lacks
  permission (or that has too many webhooks) is not retried every message.

A miss reads the channel's ManagedWebhook row and decrypts its token (old
key versions are re-encrypted under the current key), so a restart reuses the
webhook instead of making a new one. Only without a usable row does the
injected `create_webhook(channel_id)` run (the bot worker passes discord.py
calls; it may also adopt a webhook the bot already owns in the channel).

A row that cannot be decrypted (its key version is not configured, or its
ciphertext fails authentication) is kept: both happen on a configuration
error (a rolling key rotation, a rollback, a mistyped secret), and deleting
would destroy every stored webhook at once. It is unusable for now: the
channel gets a webhook from the creator that is cached in memory only, never
written over the row, so restoring the key makes the row usable again. System
check caches.W010 and the cache dashboard report rows under missing versions.

Tokens are `SecretToken`s: masked in reprs, logs and exceptions, never in
metrics.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from caches.core import BoundedTTLCache, DoNotCache
from caches.layers._feeds import Feed
from caches.layers._maps import OneMap
from caches.layers._support import parse_int, run_db
from caches.layers.declaration import (
    KeyShape,
    Layer,
    Operation,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from caches.turn_notes import note_miss
from tomori.domain.crypto import (
    EncryptedSecret,
    SecretDecryptionError,
    SecretToken,
    configured_key_versions,
    crypto_configured,
    decrypt_secret,
    encrypt_secret,
    needs_rotation,
)
from tomori.domain.knobs import knobs
from tomori.domain.repositories import population
from tomori.domain.repositories import webhooks as repo

logger = logging.getLogger(__name__)

NAME = "webhook"
_FAILED = "failed"


class _Row(enum.Enum):
    """What reading a channel's stored row gave."""

    ABSENT = "absent"
    READ = "read"
    ROTATED = "rotated"  # read, and rewritten under the current key
    UNREADABLE = "unreadable"  # kept as it is; never written over


class FailureReason(enum.Enum):
    """Why a channel has no webhook for now."""

    MISSING_PERMISSIONS = "missing_permissions"
    TOO_MANY_WEBHOOKS = "too_many_webhooks"


@dataclass(frozen=True, slots=True)
class WebhookHandle:
    """A channel's shared webhook (the token's repr is masked)."""

    webhook_disc_id: int
    channel_disc_id: int
    token: SecretToken


@dataclass(frozen=True, slots=True)
class PersonaIdentity:
    """The persona fields a webhook message is sent with."""

    persona_id: int
    name: str
    avatar_url: str | None = None


@dataclass(frozen=True, slots=True)
class PersonaWebhook:
    """What a persona's message in a channel is sent through, and as whom."""

    webhook: WebhookHandle
    persona_id: int
    username: str
    avatar_url: str | None


@dataclass(frozen=True, slots=True)
class WebhookFailure:
    """Why the channel's webhook could not be made (cached for a while)."""

    reason: FailureReason


@dataclass(frozen=True, slots=True)
class CreatedWebhook:
    """What the injected creator returns."""

    webhook_disc_id: int
    token: SecretToken


class WebhookRefused(Exception):
    """Raised by a creator when Discord refuses for a lasting reason."""

    def __init__(self, reason: FailureReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


CreateWebhook = Callable[[int], Awaitable[CreatedWebhook]]

_PERSONA = "persona"


def _channel_scope(key: Hashable) -> tuple[int, ...]:
    # A channel's handle (its id), failure ("failed", ch) and persona entries.
    if isinstance(key, int):
        return (key,)
    return (key[1],) if isinstance(key, tuple) else ()


def _persona_scope(key: Hashable) -> tuple[int, ...]:
    if isinstance(key, tuple) and key[0] == _PERSONA:
        return (key[2],)
    return ()


CAP_SETTING = "WEBHOOK_CACHE_MAX_ENTRIES"

_layer: OneMap[Hashable, object] = OneMap(
    NAME,
    cap=CAP_SETTING,
    ttl=None,
    scopes={"channel": _channel_scope, "persona": _persona_scope},
)


def webhook_cache() -> BoundedTTLCache[Hashable, object]:
    """Return this process's webhook cache (tests, metrics)."""
    return _layer.cache


def persona_webhook_key(channel_disc_id: int, persona_id: int) -> tuple[str, int, int]:
    """Return the persona webhook cache key ("persona", channel, persona)."""
    return (_PERSONA, channel_disc_id, persona_id)


def _failure_key(channel_disc_id: int) -> tuple[str, int]:
    return (_FAILED, channel_disc_id)


def _token_context(webhook_disc_id: int, channel_disc_id: int) -> str:
    # Binds a ciphertext to its row: copied onto another row, it fails.
    return f"webhook:{webhook_disc_id}:channel:{channel_disc_id}"


def get_webhook_failure(channel_disc_id: int) -> WebhookFailure | None:
    """Return why the channel has no webhook right now, or None."""
    value = _layer.cache.get(_failure_key(channel_disc_id))
    return value if isinstance(value, WebhookFailure) else None


async def get_channel_webhook(
    channel_disc_id: int,
    *,
    create_webhook: CreateWebhook,
    server_id: int | None = None,
) -> WebhookHandle | None:
    """Return the channel's shared webhook: cached, stored, or newly created.

    None when a recent attempt failed for a lasting reason (see
    `get_webhook_failure`). Other creator errors propagate and nothing is cached.
    """
    # One lookup, one count: a hit on the handle (or on a remembered
    # failure), else the one miss get_or_load counts when it loads.
    value = _layer.cache.peek(channel_disc_id)
    if not isinstance(value, WebhookHandle):
        value = _layer.cache.peek(_failure_key(channel_disc_id))
        if not isinstance(value, WebhookFailure):
            note_miss(_layer.cache.name)  # get_or_load counts the miss itself
            return await _layer.cache.get_or_load(  # type: ignore[return-value]
                channel_disc_id,
                lambda: _load_channel_webhook(
                    channel_disc_id, create_webhook, server_id
                ),
            )
    _layer.cache.hits += 1  # the handle, or the failure the cache remembers
    return value if isinstance(value, WebhookHandle) else None


async def _load_channel_webhook(
    channel_disc_id: int, create_webhook: CreateWebhook, server_id: int | None
) -> WebhookHandle | DoNotCache[WebhookHandle | None]:
    handle, row = await _rehydrate(channel_disc_id)
    if handle is not None:
        return _settle(handle) if row is _Row.ROTATED else handle
    try:
        created = await create_webhook(channel_disc_id)
    except WebhookRefused as refusal:
        _remember_failure(channel_disc_id, refusal.reason)
        return DoNotCache(None)
    handle = WebhookHandle(created.webhook_disc_id, channel_disc_id, created.token)
    if row is _Row.UNREADABLE:
        return handle  # memory only: the stored row stays as it is
    await _persist(handle, server_id)
    return _settle(handle)


def _settle(handle: WebhookHandle) -> DoNotCache[WebhookHandle | None]:
    # Our own row write invalidated this key on commit, which stales the
    # load; the row we just wrote is the newest state, so cache it directly
    # rather than re-reading it on the next message.
    _layer.cache.set(handle.channel_disc_id, handle)
    return DoNotCache(handle)


def _remember_failure(channel_disc_id: int, reason: FailureReason) -> None:
    minutes = knobs().WEBHOOK_FAILURE_CACHE_TTL_MINUTES
    _layer.cache.set(
        _failure_key(channel_disc_id), WebhookFailure(reason), minutes * 60.0
    )
    logger.info(
        "no webhook in channel %s (%s); not retrying for %d min",
        channel_disc_id,
        reason.value,
        minutes,
    )


async def _rehydrate(channel_disc_id: int) -> tuple[WebhookHandle | None, _Row]:
    """Return the stored webhook of a channel and what reading its row gave."""
    if not crypto_configured():
        return None, _Row.ABSENT
    stored = await run_db(repo.get_managed_webhook, channel_disc_id)
    if stored is None:
        return None, _Row.ABSENT
    encrypted = EncryptedSecret(stored.token_ciphertext, stored.key_version)
    context = _token_context(stored.webhook_disc_id, channel_disc_id)
    try:
        token = decrypt_secret(encrypted, context=context)
    except SecretDecryptionError as error:
        logger.warning(
            "stored webhook %s of channel %s is unreadable (%s); keeping the row "
            "and using a webhook held in memory only until it can be read",
            stored.webhook_disc_id,
            channel_disc_id,
            error,
        )
        return None, _Row.UNREADABLE
    if not needs_rotation(encrypted):
        return WebhookHandle(stored.webhook_disc_id, channel_disc_id, token), _Row.READ
    await _rotate(stored, token, context)
    return WebhookHandle(stored.webhook_disc_id, channel_disc_id, token), _Row.ROTATED


async def _rotate(stored: repo.StoredWebhook, token: SecretToken, context: str) -> None:
    rotated = encrypt_secret(token, context=context)
    await run_db(
        repo.replace_webhook_ciphertext,
        stored,
        token_ciphertext=rotated.ciphertext,
        key_version=rotated.key_version,
    )
    logger.info(
        "re-encrypted webhook %s from key v%d to v%d",
        stored.webhook_disc_id,
        stored.key_version,
        rotated.key_version,
    )


async def _persist(handle: WebhookHandle, server_id: int | None) -> None:
    if not crypto_configured():
        logger.warning(
            "CRYPTO_SECRET_CURRENT is not set: webhook %s is kept in memory only",
            handle.webhook_disc_id,
        )
        return
    context = _token_context(handle.webhook_disc_id, handle.channel_disc_id)
    encrypted = encrypt_secret(handle.token, context=context)
    try:
        await run_db(
            repo.save_managed_webhook,
            channel_disc_id=handle.channel_disc_id,
            webhook_disc_id=handle.webhook_disc_id,
            token_ciphertext=encrypted.ciphertext,
            key_version=encrypted.key_version,
            server_id=server_id,
        )
    except Exception as error:
        # The webhook works without its row; only a restart would miss it.
        logger.warning(
            "could not store webhook %s of channel %s (%s)",
            handle.webhook_disc_id,
            handle.channel_disc_id,
            type(error).__name__,
        )


async def get_persona_webhook(
    channel_disc_id: int,
    persona: PersonaIdentity,
    *,
    create_webhook: CreateWebhook,
    server_id: int | None = None,
) -> PersonaWebhook | None:
    """Return the channel webhook dressed as `persona`, or None (see failures)."""
    key = persona_webhook_key(channel_disc_id, persona.persona_id)
    value = _layer.cache.get(key)
    if isinstance(value, PersonaWebhook):
        return value
    handle = await get_channel_webhook(
        channel_disc_id, create_webhook=create_webhook, server_id=server_id
    )
    if handle is None:
        return None
    dressed = PersonaWebhook(
        handle, persona.persona_id, persona.name, persona.avatar_url
    )
    # Only while the handle is still the channel's: an invalidation during
    # the await must not leave a persona entry pointing at a dead webhook.
    if _layer.cache.peek(channel_disc_id) is handle:
        _layer.cache.set(key, dressed)
    return dressed


def invalidate_webhook_cache(channel_disc_id: int) -> int:
    """Drop a channel's webhook, its persona entries and its failure entry."""
    return _layer.cache.invalidate_scope("channel", channel_disc_id)


def invalidate_persona_webhook_cache_for_persona(persona_id: int) -> int:
    """Drop every channel's entry for one persona (its name or avatar changed)."""
    return _layer.cache.invalidate_scope("persona", persona_id)


async def discard_channel_webhook(
    channel_disc_id: int, *, webhook_disc_id: int | None = None
) -> None:
    """Forget a webhook Discord says is gone (row and cache), so the next send re-resolves."""
    await run_db(
        repo.delete_managed_webhook, channel_disc_id, webhook_disc_id=webhook_disc_id
    )
    invalidate_webhook_cache(channel_disc_id)


def webhooks_under_missing_keys() -> dict[int, int]:
    """Return {key version: stored rows} for versions this process has no secret for."""
    return repo.count_webhooks_by_key_version(exclude=configured_key_versions())


def describe_missing_keys(counts: dict[int, int]) -> str:
    """Return one line for the operator about rows under missing key versions."""
    total = sum(counts.values())
    versions = ", ".join(f"v{v}: {n}" for v, n in sorted(counts.items()))
    secrets = ", ".join(f"CRYPTO_SECRET_V{v}" for v in sorted(counts))
    return (
        f"{total} stored webhook token{'s' if total != 1 else ''} under key "
        f"versions with no secret set ({versions}): kept, but unusable until "
        f"{secrets} is set again; meanwhile those channels use webhooks held "
        "in memory only."
    )


def parse_webhook_key(text: str) -> Hashable:
    """Turn `<channel>`, `<channel>:<persona>` or `failed:<channel>` into a key."""
    text = text.strip()
    if text.startswith(f"{_FAILED}:"):
        return _failure_key(parse_int(text.removeprefix(f"{_FAILED}:")))
    channel, sep, persona = text.partition(":")
    if not sep:
        return parse_int(channel)
    return persona_webhook_key(parse_int(channel), parse_int(persona))


LAYER = Layer(
    name=NAME,
    description=(
        "Channel webhooks and persona webhook identities (no ttl, capped), plus "
        "short-lived failure entries; tokens are stored encrypted."
    ),
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="<channel id>, <channel id>:<persona id> or failed:<channel id>",
        parse=parse_webhook_key,
    ),
    feeds=(
        Feed("tomori.ManagedWebhook", "channel", ("channel_disc_id",)),
        Feed("tomori.Persona", "persona", ("id",), fields=("avatar_url", "name")),
    ),
    build=_layer.build,
    settings=(CAP_SETTING,),
    ops=(
        Operation(
            "channel",
            invalidate_webhook_cache,
            description="Drop a channel's webhook, persona and failure entries.",
            phrase=lambda c: f"webhooks of channel {c}",
        ),
        Operation(
            "persona",
            invalidate_persona_webhook_cache_for_persona,
            description="Drop one persona's entry in every channel.",
            phrase=lambda p: f"webhooks of persona #{p}",
        ),
    ),
    mistaken_for=PopulationSpec("managed webhooks", population.managed_webhooks),
)
