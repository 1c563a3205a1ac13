"""Saving a server's model config in the admin never blanks its API key."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from tomori.admin.domain import ModelConfigForm
from tomori.domain import models as m

pytestmark = pytest.mark.django_db


@pytest.fixture
def config() -> m.ServerModelConfig:
    server = m.Server.objects.create(server_disc_id=4242, name="alpha")
    return m.ServerModelConfig.objects.create(server=server, api_key="sk-secret")


def _save(config: m.ServerModelConfig, **data: object) -> m.ServerModelConfig:
    form = ModelConfigForm(data={"temperature": "0.7", **data}, instance=config)
    assert form.is_valid(), form.errors
    form.save()
    config.refresh_from_db()
    return config


def test_empty_key_field_keeps_the_stored_key(config: m.ServerModelConfig) -> None:
    assert _save(config, new_api_key="").api_key == "sk-secret"


def test_typed_key_replaces_the_stored_key(config: m.ServerModelConfig) -> None:
    assert _save(config, new_api_key=" sk-new ").api_key == "sk-new"


def test_remove_box_clears_the_key(config: m.ServerModelConfig) -> None:
    assert _save(config, remove_api_key="on").api_key is None


def test_admin_change_page_save_keeps_the_key(admin_client, config) -> None:  # type: ignore[no-untyped-def]
    url = reverse("admin:tomori_servermodelconfig_change", args=[config.pk])
    page = admin_client.get(url)
    assert b"sk-secret" not in page.content
    response = admin_client.post(
        url,
        {
            "server": config.server_id,
            "llm": "",
            "new_api_key": "",
            "temperature": "0.5",
        },
    )
    assert response.status_code == 302
    config.refresh_from_db()
    assert config.api_key == "sk-secret" and config.temperature == 0.5


def test_blank_key_is_rejected_by_the_database(config: m.ServerModelConfig) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        m.ServerModelConfig.objects.filter(pk=config.pk).update(api_key="")
