"""Writes made through the Django admin invalidate: change form, delete view, bulk delete."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.caches.invalidation import probes
from tomori.domain import models as m

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres")]


def test_admin_change_form_invalidates(admin_client, layers, world, commit):
    user = world.user(language="en")
    row = probes.user_row(user)
    assert layers.warm(row)[0].language == "en"

    with commit():
        response = admin_client.post(
            reverse("admin:tomori_user_change", args=[user.pk]),
            {
                "user_disc_id": user.user_disc_id,
                "username": user.username,
                "privacy_level": 2,
                "language": "de",
                "personal_memories_enabled": "on",
            },
        )

    assert response.status_code == 302, response.content[:2000]
    served = layers.read(row)
    assert (served.privacy_level, served.language) == (2, "de")


def test_admin_change_of_many_to_many_invalidates(admin_client, layers, world, commit):
    server = world.server()
    persona = world.persona(server)
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=71)
    decision = probes.whitelist(server, 71)
    assert layers.warm(decision)[0].persona_ids == ()

    with commit():
        response = admin_client.post(
            reverse("admin:tomori_whitelistedchannel_change", args=[row.pk]),
            {
                "server": server.pk,
                "channel_disc_id": 71,
                "personas": [persona.pk],
                "cooldown_type": "none",
                "cooldown_seconds": 0,
            },
        )

    assert response.status_code == 302, response.content[:2000]
    assert layers.read(decision).persona_ids == (persona.id,)


def _names(state) -> list[str]:  # type: ignore[no-untyped-def]
    return [p.name for p in state.personas]


def test_admin_delete_view_invalidates(admin_client, layers, world, commit):
    server = world.server()
    persona = world.persona(server)
    state = probes.state(server)
    assert _names(layers.warm(state)[0]) == ["main", persona.name]

    with commit():
        response = admin_client.post(
            reverse("admin:tomori_persona_delete", args=[persona.pk]), {"post": "yes"}
        )

    assert response.status_code == 302
    assert _names(layers.read(state)) == ["main"]


def test_admin_bulk_delete_action_invalidates(admin_client, layers, world, commit):
    first, second = world.server(), world.server()
    personas = [world.persona(first), world.persona(second)]
    states = [probes.state(first), probes.state(second)]
    layers.warm(*states)

    with commit():
        response = admin_client.post(
            reverse("admin:tomori_persona_changelist"),
            {
                "action": "delete_selected",
                "_selected_action": [p.pk for p in personas],
                "post": "yes",
            },
        )

    assert response.status_code == 302
    assert not m.Persona.objects.filter(pk__in=[p.pk for p in personas]).exists()
    assert [_names(layers.read(s)) for s in states] == [["main"], ["main"]]
