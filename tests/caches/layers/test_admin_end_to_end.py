"""Edits made in the Django admin show in the next cached read of the real layers."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from caches.layers.channel_prompt import get_cached_channel_prompt
from caches.layers.channel_whitelist import get_cached_whitelist_status
from caches.layers.persona_sprite import get_cached_persona_sprites
from caches.layers.personal_spotlight import get_cached_personal_spotlight_status
from caches.layers.tomori_state import get_cached_all_personas
from tomori.domain import models as m

pytestmark = pytest.mark.django_db


def _form_data(form: Any, prefix: str = "") -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in form.fields:
        value = form[name].value()
        key = f"{prefix}{name}"
        if isinstance(value, bool):
            if value:
                data[key] = "on"
        elif isinstance(value, list | tuple):
            data[key] = [str(v) for v in value]
        elif value is not None:
            data[key] = value.pk if isinstance(value, Model) else value
    return data


def admin_edit(client: Client, obj: Model, **changes: Any) -> None:
    """Post the object's admin change form as shown, with `changes` applied."""
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    page = client.get(url)
    data = _form_data(page.context["adminform"].form)
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update(_form_data(formset.management_form, f"{formset.prefix}-"))
        for index, form in enumerate(formset.initial_forms):
            data.update(_form_data(form, f"{formset.prefix}-{index}-"))
    data.update(changes)
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors


def admin_add(client: Client, model: type[Model], **fields: Any) -> None:
    """Post the model's admin add form."""
    opts = model._meta
    response = client.post(
        reverse(f"admin:{opts.app_label}_{opts.model_name}_add"), fields
    )
    assert response.status_code == 302, response.context["adminform"].form.errors


@pytest.fixture
def server() -> m.Server:
    server = m.Server.objects.create(server_disc_id=777_001, name="alpha")
    m.ServerModelConfig.objects.create(server=server, api_key="sk-x")
    return server


@pytest.fixture
def persona(server: m.Server) -> m.Persona:
    return m.Persona.objects.create(server=server, name="Tomori", is_main=True)


def test_persona_rename_in_the_admin_shows_in_the_next_read(
    admin_client,
    server,
    persona,
    run,
    django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
) -> None:
    assert [p.name for p in run(get_cached_all_personas, server.server_disc_id)] == [
        "Tomori"
    ]
    with django_capture_on_commit_callbacks(execute=True):
        admin_edit(admin_client, persona, name="Tomori Prime")
    assert [p.name for p in run(get_cached_all_personas, server.server_disc_id)] == [
        "Tomori Prime"
    ]


def test_whitelisting_a_channel_in_the_admin_shows_in_the_next_read(
    admin_client,
    server,
    run,
    django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
) -> None:
    server.channel_whitelist_enabled = True
    server.save()
    assert not run(get_cached_whitelist_status, server.server_disc_id, 55).allowed
    with django_capture_on_commit_callbacks(execute=True):
        admin_add(
            admin_client,
            m.WhitelistedChannel,
            server=server.pk,
            channel_disc_id=55,
            cooldown_type="none",
            cooldown_seconds=0,
        )
    assert run(get_cached_whitelist_status, server.server_disc_id, 55).allowed


def test_channel_prompt_edit_in_the_admin_shows_in_the_next_read(
    admin_client,
    server,
    run,
    django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
) -> None:
    row = m.ChannelPromptOverride.objects.create(
        server=server, channel_disc_id=9, prompt="be brief"
    )
    assert run(get_cached_channel_prompt, server.pk, 9).prompt == "be brief"
    with django_capture_on_commit_callbacks(execute=True):
        admin_edit(admin_client, row, prompt="be kind", mode="replace")
    prompt = run(get_cached_channel_prompt, server.pk, 9)
    assert (prompt.prompt, prompt.mode) == ("be kind", "replace")


def test_sprite_edit_in_the_admin_shows_in_the_next_read(
    admin_client,
    persona,
    run,
    django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
) -> None:
    sprite = m.PersonaSprite.objects.create(
        persona=persona, name="smile", image_url="https://x.test/a.png"
    )
    assert [s.name for s in run(get_cached_persona_sprites, persona.pk)] == ["smile"]
    with django_capture_on_commit_callbacks(execute=True):
        admin_edit(admin_client, sprite, name="grin")
    assert [s.name for s in run(get_cached_persona_sprites, persona.pk)] == ["grin"]


def test_spotlight_added_in_the_admin_shows_in_the_next_read(
    admin_client,
    server,
    persona,
    run,
    django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
) -> None:
    user = m.User.objects.create(user_disc_id=31337, username="ann")
    assert run(get_cached_personal_spotlight_status, server.pk, user.pk, 12) is None
    with django_capture_on_commit_callbacks(execute=True):
        admin_add(
            admin_client,
            m.PersonalSpotlight,
            server=server.pk,
            user=user.pk,
            channel_disc_id=12,
            persona=persona.pk,
        )
    spotlight = run(get_cached_personal_spotlight_status, server.pk, user.pk, 12)
    assert spotlight is not None
