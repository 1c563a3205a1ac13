"""Webhook cache: resolve, persist encrypted, rehydrate, rotate, fail, invalidate."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.test import override_settings

from caches.core import FakeClock
from caches.layers.webhook import (
    FailureReason,
    PersonaIdentity,
    WebhookHandle,
    discard_channel_webhook,
    get_channel_webhook,
    get_persona_webhook,
    get_webhook_failure,
    invalidate_persona_webhook_cache_for_persona,
    invalidate_webhook_cache,
    persona_webhook_key,
    webhook_cache,
)
from caches.registry import registry
from tests.caches.layers.webhook.conftest import FakeDiscordWebhooks
from tomori.domain.knobs import knobs
from tomori.domain.models import ManagedWebhook
from tomori.domain.repositories import webhooks as repo

CHANNEL = 4242
V1 = {1: "first-secret-for-tests"}
V1_V2 = {1: "first-secret-for-tests", 2: "second-secret-for-tests"}
db = pytest.mark.django_db(transaction=True)


def _row(channel: int = CHANNEL) -> ManagedWebhook | None:
    return ManagedWebhook.objects.filter(channel_disc_id=channel).first()


row = sync_to_async(_row)


async def _resolve(fake: FakeDiscordWebhooks, channel: int = CHANNEL):
    return await get_channel_webhook(channel, create_webhook=fake.create_webhook)


def _restart() -> None:
    """Lose every cached webhook, as a new process would."""
    registry.clear("webhook")


@db
async def test_first_resolve_creates_and_stores_the_token_encrypted(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    handle = await _resolve(discord_webhooks)
    assert discord_webhooks.created == [CHANNEL]
    stored = await row()
    assert stored.webhook_disc_id == handle.webhook_disc_id
    assert handle.token.reveal() not in stored.token_ciphertext
    assert stored.key_version == int(settings.CRYPTO_SECRET_CURRENT)


@db
async def test_restart_rehydrates_without_creating_a_webhook(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    first = await _resolve(discord_webhooks)
    _restart()
    again = await _resolve(discord_webhooks)
    assert discord_webhooks.created == [CHANNEL]
    assert again == first


@db
async def test_warm_resolve_is_served_from_memory(
    discord_webhooks: FakeDiscordWebhooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _resolve(discord_webhooks)
    _restart()
    await _resolve(discord_webhooks)  # rehydrated: no write, so it stays cached
    reads: list[int] = []
    monkeypatch.setattr(repo, "get_managed_webhook", reads.append)
    loads = webhook_cache().stats()["loads"]
    handle = await _resolve(discord_webhooks)
    assert isinstance(handle, WebhookHandle)
    assert reads == [] and webhook_cache().stats()["loads"] == loads


@db
async def test_concurrent_misses_create_one_webhook(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    handles = await asyncio.gather(*(_resolve(discord_webhooks) for _ in range(5)))
    assert discord_webhooks.created == [CHANNEL]
    assert len({h.webhook_disc_id for h in handles}) == 1


@db
async def test_rows_under_an_old_key_are_read_then_reencrypted(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    with override_settings(CRYPTO_SECRETS=V1, CRYPTO_SECRET_CURRENT="1"):
        first = await _resolve(discord_webhooks)
        old = await row()
    _restart()
    with override_settings(CRYPTO_SECRETS=V1_V2, CRYPTO_SECRET_CURRENT="2"):
        assert await _resolve(discord_webhooks) == first
        rotated = await row()
    assert rotated.key_version == 2
    assert rotated.token_ciphertext != old.token_ciphertext
    _restart()
    with override_settings(CRYPTO_SECRETS={2: V1_V2[2]}, CRYPTO_SECRET_CURRENT="2"):
        assert await _resolve(discord_webhooks) == first  # V1 retired: still fine
    assert discord_webhooks.created == [CHANNEL]


async def _row_fields(channel: int = CHANNEL) -> tuple[int, str, int]:
    stored = await row(channel)
    return stored.webhook_disc_id, stored.token_ciphertext, stored.key_version


@db
async def test_row_under_a_missing_key_is_kept_and_a_memory_webhook_serves(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    with override_settings(CRYPTO_SECRETS=V1_V2, CRYPTO_SECRET_CURRENT="2"):
        first = await _resolve(discord_webhooks)
        stored = await _row_fields()
    _restart()
    with override_settings(CRYPTO_SECRETS=V1, CRYPTO_SECRET_CURRENT="1"):  # rollback
        fallback = await _resolve(discord_webhooks)
        assert await _resolve(discord_webhooks) is fallback  # cached: made once
    assert fallback.webhook_disc_id != first.webhook_disc_id
    assert await _row_fields() == stored  # neither deleted nor written over
    assert discord_webhooks.created == [CHANNEL, CHANNEL]
    _restart()
    with override_settings(CRYPTO_SECRETS=V1_V2, CRYPTO_SECRET_CURRENT="2"):
        assert await _resolve(discord_webhooks) == first  # the key is back
    assert len(discord_webhooks.created) == 2


@db
async def test_tampered_row_is_kept_and_not_written_over(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    first = await _resolve(discord_webhooks)
    stored = await row()
    stored.token_ciphertext = stored.token_ciphertext[:-6] + "AAAAAA"
    await sync_to_async(stored.save)()
    _restart()
    second = await _resolve(discord_webhooks)
    assert discord_webhooks.created == [CHANNEL, CHANNEL]
    assert second.webhook_disc_id != first.webhook_disc_id
    # A changed secret looks the same as tampering: the row stays for the operator.
    kept = await row()
    assert kept.webhook_disc_id == first.webhook_disc_id
    assert kept.token_ciphertext == stored.token_ciphertext


@db
def test_check_warns_about_rows_under_missing_key_versions() -> None:
    from tomori.checks import check_webhook_key_versions

    for channel, version in [(1, 1), (2, 2), (3, 2), (4, 5)]:
        repo.save_managed_webhook(
            channel_disc_id=channel,
            webhook_disc_id=100 + channel,
            token_ciphertext="opaque",
            key_version=version,
        )
    with override_settings(CRYPTO_SECRETS=V1, CRYPTO_SECRET_CURRENT="1"):
        [warning] = check_webhook_key_versions(databases=["default"])
        assert check_webhook_key_versions(databases=None) == []  # no DB asked for
    assert warning.id == "caches.W010"
    assert "3 stored webhook tokens" in warning.msg
    assert "(v2: 2, v5: 1)" in warning.msg
    assert "CRYPTO_SECRET_V2, CRYPTO_SECRET_V5" in warning.msg
    assert ManagedWebhook.objects.count() == 4
    with override_settings(CRYPTO_SECRETS={**V1_V2, 5: "fifth"}):
        assert check_webhook_key_versions(databases=["default"]) == []


@db
def test_manage_check_with_the_database_reports_the_warning() -> None:
    from io import StringIO

    from django.core.management import call_command

    repo.save_managed_webhook(
        channel_disc_id=1, webhook_disc_id=2, token_ciphertext="x", key_version=9
    )
    out, err = StringIO(), StringIO()
    call_command("check", databases=["default"], stdout=out, stderr=err)
    assert "caches.W010" in out.getvalue() + err.getvalue()
    assert "CRYPTO_SECRET_V9" in out.getvalue() + err.getvalue()


@db
async def test_refused_channel_is_not_retried_until_the_failure_expires(
    discord_webhooks: FakeDiscordWebhooks, clock: FakeClock
) -> None:
    discord_webhooks.refuse[CHANNEL] = FailureReason.MISSING_PERMISSIONS
    assert await _resolve(discord_webhooks) is None
    failure = get_webhook_failure(CHANNEL)
    assert failure.reason is FailureReason.MISSING_PERMISSIONS
    del discord_webhooks.refuse[CHANNEL]
    stats = registry.stats()["webhook"]
    assert await _resolve(discord_webhooks) is None
    assert discord_webhooks.created == []
    # answered from the remembered failure: one hit, no miss
    after = registry.stats()["webhook"]
    assert (after["hits"], after["misses"]) == (stats["hits"] + 1, stats["misses"])
    clock.advance(knobs().WEBHOOK_FAILURE_CACHE_TTL_MINUTES * 60)
    assert await _resolve(discord_webhooks) is not None
    assert discord_webhooks.created == [CHANNEL]


@db
async def test_creator_errors_propagate_and_cache_nothing() -> None:
    async def broken(channel: int):
        raise ConnectionError("discord down")

    with pytest.raises(ConnectionError):
        await get_channel_webhook(CHANNEL, create_webhook=broken)
    assert len(webhook_cache()) == 0


@db
async def test_persona_webhook_wears_the_persona_and_is_cached(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    persona = PersonaIdentity(7, "Tomori", "https://cdn.example/a.png")
    dressed = await get_persona_webhook(
        CHANNEL, persona, create_webhook=discord_webhooks.create_webhook
    )
    assert (dressed.username, dressed.avatar_url) == ("Tomori", persona.avatar_url)
    assert webhook_cache().peek(persona_webhook_key(CHANNEL, 7)) is dressed
    again = await get_persona_webhook(
        CHANNEL, persona, create_webhook=discord_webhooks.create_webhook
    )
    assert again is dressed


@db
async def test_channel_invalidation_drops_its_personas_and_failure(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    for persona_id in (1, 2):
        await get_persona_webhook(
            CHANNEL,
            PersonaIdentity(persona_id, f"p{persona_id}"),
            create_webhook=discord_webhooks.create_webhook,
        )
    await get_persona_webhook(
        99, PersonaIdentity(1, "p1"), create_webhook=discord_webhooks.create_webhook
    )
    discord_webhooks.refuse[5] = FailureReason.TOO_MANY_WEBHOOKS
    await _resolve(discord_webhooks, 5)
    assert invalidate_webhook_cache(CHANNEL) == 3
    assert registry.apply("webhook", "channel", 5) == 1
    assert sorted(map(str, webhook_cache().keys())) == ["('persona', 99, 1)", "99"]


@db
async def test_persona_invalidation_drops_that_persona_everywhere(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    for channel in (1, 2):
        for persona_id in (7, 17):
            await get_persona_webhook(
                channel,
                PersonaIdentity(persona_id, "x"),
                create_webhook=discord_webhooks.create_webhook,
            )
    assert invalidate_persona_webhook_cache_for_persona(7) == 2
    assert registry.apply("webhook", "persona", 17) == 2
    assert sorted(webhook_cache().keys()) == [1, 2]


@db
async def test_discarded_webhook_is_forgotten_and_recreated(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    first = await _resolve(discord_webhooks)
    await discard_channel_webhook(CHANNEL, webhook_disc_id=first.webhook_disc_id)
    assert await row() is None
    second = await _resolve(discord_webhooks)
    assert second.webhook_disc_id != first.webhook_disc_id


@db
async def test_without_keys_webhooks_live_in_memory_only(
    discord_webhooks: FakeDiscordWebhooks,
) -> None:
    with override_settings(CRYPTO_SECRET_CURRENT=""):
        assert await _resolve(discord_webhooks) is not None
    assert await row() is None


@db
async def test_tokens_never_reach_logs_reprs_or_metrics(
    discord_webhooks: FakeDiscordWebhooks, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with override_settings(CRYPTO_SECRETS=V1, CRYPTO_SECRET_CURRENT="1"):
        handle = await _resolve(discord_webhooks)
    _restart()
    with override_settings(CRYPTO_SECRETS=V1_V2, CRYPTO_SECRET_CURRENT="2"):
        await _resolve(discord_webhooks)  # rotation logs
        stored = await row()
        stored.token_ciphertext = stored.token_ciphertext[:-6] + "AAAAAA"
        await sync_to_async(stored.save)()
        _restart()
        await _resolve(discord_webhooks)  # "unreadable" logs
    secret = handle.token.reveal()
    assert "re-encrypted" in caplog.text and "unreadable" in caplog.text
    assert secret not in caplog.text
    assert secret not in repr(handle) and secret not in repr(webhook_cache().items())
    assert secret not in json.dumps(registry.stats(), default=str)


def test_admin_change_page_masks_the_token(admin_client) -> None:
    from tomori.domain.crypto import SecretToken, encrypt_secret
    from tomori.domain.repositories.webhooks import save_managed_webhook

    secret = "admin-page-secret-token-value"
    encrypted = encrypt_secret(SecretToken(secret), context="x")
    stored = save_managed_webhook(
        channel_disc_id=1,
        webhook_disc_id=2,
        token_ciphertext=encrypted.ciphertext,
        key_version=encrypted.key_version,
    )
    for url in (
        f"/admin/tomori/managedwebhook/{stored.row_id}/change/",
        "/admin/tomori/managedwebhook/",
    ):
        page = admin_client.get(url)
        assert page.status_code == 200
        html = page.content.decode()
        assert secret not in html
        assert encrypted.ciphertext not in html
        assert "encrypted" in html


@db
def test_runbot_reports_rows_under_missing_keys_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from io import StringIO

    from django.core.management import call_command

    class NoWorker:
        worker_id = "no-worker"

        def __init__(self, options: object) -> None:
            pass

        async def run(self, **_: object) -> int:
            return 0

        def disarm_watchdog(self) -> None:
            pass

    monkeypatch.setattr("tomori.management.commands.runbot.BotWorker", NoWorker)
    repo.save_managed_webhook(
        channel_disc_id=1, webhook_disc_id=2, token_ciphertext="x", key_version=4
    )
    err = StringIO()
    call_command(
        "runbot", "--simulate", skip_checks=False, stdout=StringIO(), stderr=err
    )
    assert "caches.W010" in err.getvalue() and "CRYPTO_SECRET_V4" in err.getvalue()
    assert ManagedWebhook.objects.filter(key_version=4).exists()
