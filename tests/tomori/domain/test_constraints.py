"""Database constraints reject the rows the caches must never see."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from tomori.domain import models as m

pytestmark = pytest.mark.django_db


@pytest.fixture
def server() -> m.Server:
    return m.Server.objects.create(server_disc_id=1001, name="alpha")


def _rejected(create) -> bool:  # type: ignore[no-untyped-def]
    try:
        with transaction.atomic():
            create()
    except IntegrityError:
        return True
    return False


def test_second_webhook_for_a_channel_is_rejected(server: m.Server) -> None:
    m.ManagedWebhook.objects.create(
        server=server,
        channel_disc_id=5,
        webhook_disc_id=50,
        token_ciphertext="x",
        key_version=1,
    )
    assert _rejected(
        lambda: m.ManagedWebhook.objects.create(
            server=server,
            channel_disc_id=5,
            webhook_disc_id=51,
            token_ciphertext="y",
            key_version=1,
        )
    )
    assert _rejected(
        lambda: m.ManagedWebhook.objects.create(
            server=server,
            channel_disc_id=6,
            webhook_disc_id=50,
            token_ciphertext="y",
            key_version=1,
        )
    )


def test_sprite_instructions_over_1000_are_rejected(server: m.Server) -> None:
    persona = m.Persona.objects.create(server=server, name="Tomori", is_main=True)
    m.PersonaSprite.objects.create(
        persona=persona,
        name="ok",
        image_url="https://x.test/a.png",
        instructions="a" * 1000,
    )
    assert _rejected(
        lambda: m.PersonaSprite.objects.create(
            persona=persona,
            name="long",
            image_url="https://x.test/b.png",
            instructions="a" * 1001,
        )
    )


def test_cooldown_over_a_day_is_rejected(server: m.Server) -> None:
    m.WhitelistedChannel.objects.create(
        server=server, channel_disc_id=1, cooldown_type="user", cooldown_seconds=86_400
    )
    assert _rejected(
        lambda: m.WhitelistedChannel.objects.create(
            server=server,
            channel_disc_id=2,
            cooldown_type="user",
            cooldown_seconds=86_401,
        )
    )


def test_second_main_persona_is_rejected(server: m.Server) -> None:
    m.Persona.objects.create(server=server, name="Main", is_main=True)
    m.Persona.objects.create(server=server, name="Alter", is_main=False)
    assert _rejected(
        lambda: m.Persona.objects.create(server=server, name="Other", is_main=True)
    )


def test_second_default_llm_per_provider_is_rejected() -> None:
    m.Llm.objects.create(provider="openrouter", codename="a", is_default=True)
    m.Llm.objects.create(provider="google", codename="b", is_default=True)
    assert _rejected(
        lambda: m.Llm.objects.create(
            provider="openrouter", codename="c", is_default=True
        )
    )


def test_empty_sprite_message_name_is_rejected(server: m.Server) -> None:
    persona = m.Persona.objects.create(server=server, name="Tomori", is_main=True)
    assert _rejected(
        lambda: m.PersonaSpriteMessage.objects.create(
            message_disc_id=9, persona=persona, sprite_name="", channel_disc_id=1
        )
    )


def test_privacy_level_out_of_range_is_rejected() -> None:
    assert _rejected(lambda: m.User.objects.create(user_disc_id=7, privacy_level=9))
