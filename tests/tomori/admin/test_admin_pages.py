"""Every domain model's admin pages render for a superuser."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from tomori.domain import models as m

pytestmark = pytest.mark.django_db

DOMAIN_MODELS = [
    model
    for model in admin.site._registry
    if model._meta.app_label in {"tomori", "metrics"}
]


@pytest.fixture
def seeded() -> None:
    server = m.Server.objects.create(server_disc_id=1001, name="alpha")
    persona = m.Persona.objects.create(server=server, name="Tomori", is_main=True)
    m.PersonaSprite.objects.create(
        persona=persona, name="smile", image_url="https://x.test/s.png"
    )
    m.ManagedWebhook.objects.create(
        server=server,
        channel_disc_id=5,
        webhook_disc_id=50,
        token_ciphertext="secret-cipher",
        key_version=1,
    )


def test_every_domain_model_is_registered() -> None:
    from django.apps import apps

    concrete = [
        model
        for model in apps.get_app_config("tomori").get_models()
        if not model._meta.auto_created
    ]
    unregistered = [
        model.__name__ for model in concrete if model not in admin.site._registry
    ]
    assert unregistered == []


@pytest.mark.parametrize("model", DOMAIN_MODELS, ids=lambda model: model.__name__)
def test_changelist_and_add_pages_render(admin_client, seeded, model) -> None:  # type: ignore[no-untyped-def]
    opts = model._meta
    changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    assert admin_client.get(changelist).status_code == 200
    assert admin_client.get(changelist, {"q": "alpha"}).status_code == 200
    add = reverse(f"admin:{opts.app_label}_{opts.model_name}_add")
    assert admin_client.get(add).status_code in (200, 403)
    first = model.objects.first()
    if first is not None:
        change = reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk]
        )
        assert admin_client.get(change).status_code == 200
