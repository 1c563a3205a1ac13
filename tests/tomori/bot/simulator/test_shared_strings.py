"""Cached members share one string object per distinct presence status."""

from __future__ import annotations

from sys import intern

import pytest
from discord.presences import ClientStatus

from tomori.bot import shared_strings
from tomori.bot.simulator import SimulatedDiscord

from .conftest import EVENT_TIMEOUT, StartClient


@pytest.fixture
def sharing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Put discord.py's own methods back afterwards (install is once per process).
    monkeypatch.setattr(ClientStatus, "__init__", ClientStatus.__init__)
    monkeypatch.setattr(ClientStatus, "_update", ClientStatus._update)
    shared_strings.install()
    shared_strings.install()  # a second install wraps nothing twice


def _statuses(client) -> list[ClientStatus]:  # type: ignore[no-untyped-def]
    return [
        member.client_status
        for guild in client.guilds
        for member in guild.members
        if member.client_status._status != "offline"
    ]


async def test_members_share_presence_strings(
    sharing: None, sim: SimulatedDiscord, start_client: StartClient
) -> None:
    assert shared_strings.installed()
    client = await start_client()
    statuses = _statuses(client)
    assert len(statuses) >= 2
    by_text: dict[str, set[int]] = {}
    for status in statuses:
        for text in (status._status, status.desktop, status.mobile, status.web):
            if text is not None:
                by_text.setdefault(text, set()).add(id(text))
    assert by_text and all(len(ids) == 1 for ids in by_text.values()), by_text
    # A presence update builds its status through the shared path too.
    member = statuses[0]
    user_id = next(
        m.id for g in client.guilds for m in g.members if m.client_status is member
    )
    changed = client.wait_for(
        "presence_update", check=lambda b, a: a.id == user_id, timeout=EVENT_TIMEOUT
    )
    await sim.presence_update(user_id, status="idle", activities=[])
    _, after = await changed
    assert after.client_status._status is intern("idle")


def test_a_value_that_is_no_string_is_kept_as_it_came(sharing: None) -> None:
    status = ClientStatus(status="online", data={"desktop": 1, "web": "idle"})  # type: ignore[typeddict-item]
    assert status.desktop == 1 and status.web is intern("idle")
