"""Writes made through the Django admin invalidate: change form, delete view, bulk delete."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tomori import models as m

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres")]


def test_admin_change_form_invalidates(admin_client, caches, world, commit):
    user = world.user(language="en")
    caches.read("user", user.user_disc_id)

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
    assert caches.read("user", user.user_disc_id)[1:] == (2, "de")
    assert caches.stale() == []


def test_admin_change_of_many_to_many_invalidates(admin_client, caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    row = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=71)
    key = f"{server.server_disc_id}:71:0:0"
    caches.read("channel_whitelist", key)

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
    assert caches.read("channel_whitelist", key)[1][0][3] == (persona.name,)
    assert caches.stale() == []


def test_admin_delete_view_invalidates(admin_client, caches, world, commit):
    server = world.server()
    persona = world.persona(server)
    caches.read("tomori_state", server.server_disc_id)

    with commit():
        response = admin_client.post(
            reverse("admin:tomori_persona_delete", args=[persona.pk]), {"post": "yes"}
        )

    assert response.status_code == 302
    assert caches.read("tomori_state", server.server_disc_id)[4] == ()
    assert caches.stale() == []


def test_admin_bulk_delete_action_invalidates(admin_client, caches, world, commit):
    first, second = world.server(), world.server()
    personas = [world.persona(first), world.persona(second)]
    caches.read("tomori_state", first.server_disc_id)
    caches.read("tomori_state", second.server_disc_id)

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
    assert caches.stale() == []
