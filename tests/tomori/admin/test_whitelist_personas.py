"""A whitelisted channel is restricted only to personas of its own server."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse

from tomori.domain import models as m

pytestmark = pytest.mark.django_db

OPTION = re.compile(r'<option value="(\d+)"[^>]*>([^<]*)</option>')


@pytest.fixture
def world() -> dict[str, object]:
    alpha = m.Server.objects.create(server_disc_id=1001, name="alpha")
    beta = m.Server.objects.create(server_disc_id=1002, name="beta")
    return {
        "alpha": alpha,
        "beta": beta,
        "own": m.Persona.objects.create(server=alpha, name="Tomori", is_main=True),
        "other": m.Persona.objects.create(server=beta, name="Tomori", is_main=True),
        "channel": m.WhitelistedChannel.objects.create(server=alpha, channel_disc_id=5),
    }


def _persona_options(html: str) -> list[str]:
    return [label for _, label in OPTION.findall(html) if label.startswith("Tomori")]


def _post(admin_client, url: str, server: m.Server, personas: list[m.Persona]):  # type: ignore[no-untyped-def]
    data = {
        "server": server.pk,
        "channel_disc_id": "6",
        "personas": [p.pk for p in personas],
        "cooldown_type": "none",
        "cooldown_seconds": "0",
    }
    return admin_client.post(url, data)


def test_the_change_form_offers_only_the_servers_personas_labelled(
    admin_client, world
) -> None:  # type: ignore[no-untyped-def]
    url = reverse("admin:tomori_whitelistedchannel_change", args=[world["channel"].pk])
    assert _persona_options(admin_client.get(url).content.decode()) == [
        "Tomori (alpha)"
    ]


def test_the_add_form_labels_every_persona_with_its_server(admin_client, world) -> None:  # type: ignore[no-untyped-def]
    html = admin_client.get(reverse("admin:tomori_whitelistedchannel_add")).content
    assert sorted(_persona_options(html.decode())) == [
        "Tomori (alpha)",
        "Tomori (beta)",
    ]


def test_saving_another_servers_persona_is_a_form_error(admin_client, world) -> None:  # type: ignore[no-untyped-def]
    add = reverse("admin:tomori_whitelistedchannel_add")
    response = _post(admin_client, add, world["alpha"], [world["other"]])
    assert response.status_code == 200
    assert "personas of its own server (not Tomori (beta))" in response.content.decode()
    assert not m.WhitelistedChannel.objects.filter(channel_disc_id=6).exists()
    change = reverse(
        "admin:tomori_whitelistedchannel_change", args=[world["channel"].pk]
    )
    response = _post(admin_client, change, world["alpha"], [world["other"]])
    assert response.status_code == 200
    assert list(world["channel"].personas.all()) == []


def test_saving_the_servers_own_persona_succeeds(admin_client, world) -> None:  # type: ignore[no-untyped-def]
    add = reverse("admin:tomori_whitelistedchannel_add")
    response = _post(admin_client, add, world["alpha"], [world["own"]])
    assert response.status_code == 302
    channel = m.WhitelistedChannel.objects.get(channel_disc_id=6)
    assert list(channel.personas.all()) == [world["own"]]


def test_writes_outside_the_form_cannot_link_another_servers_persona(world) -> None:  # type: ignore[no-untyped-def]
    channel, own, other = world["channel"], world["own"], world["other"]
    for write in (
        lambda: channel.personas.add(other),
        lambda: channel.personas.set([own, other]),
        lambda: other.whitelisted_channels.add(channel),
    ):
        with pytest.raises(ValidationError, match="own server"), transaction.atomic():
            write()
    assert list(channel.personas.all()) == []
    own.whitelisted_channels.add(channel)
    channel.personas.add(own)
    assert list(channel.personas.all()) == [own]


def test_a_spotlight_on_another_servers_persona_is_rejected(world) -> None:  # type: ignore[no-untyped-def]
    user = m.User.objects.create(user_disc_id=77)
    spotlight = m.PersonalSpotlight(
        server=world["alpha"], user=user, channel_disc_id=5, persona=world["other"]
    )
    with pytest.raises(ValidationError) as exc:
        spotlight.full_clean()
    assert "persona" in exc.value.message_dict
    spotlight.persona = world["own"]
    spotlight.full_clean()
