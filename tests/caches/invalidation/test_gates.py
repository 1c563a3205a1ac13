"""Every write feeding a per-server map (override gates, whitelist rows) drops it.

The channel LLM and prompt layers answer a channel from its server's gate
(the channels with an override), and the whitelist decides a new question
from its server's rows: so a write that drops only the entry of the channel
it names would leave every other channel of the server answered from the old
gate or rows. Each case warms the server's map (a channel never asked about
is answered with no query), writes through one path in a committed block,
and proves the map is gone and a channel first asked after the write is
served what the database holds. The last tests write from another process
(through the bus) and from outside Django (through the outbox).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from caches import bus
from caches.core import MISSING
from caches.registry import registry
from tests.caches.invalidation import probes
from tests.caches.invalidation.conftest import (
    Layers,
    Probe,
    World,
    run_in_another_process,
)
from tests.support.outside import outside_client, registry_follower
from tomori.domain import models as m

SEEN, NEW, FAR = 70, 71, 72  # warmed, first asked after the write, a row's old home

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres")]


@dataclass
class Guild:
    """The rows a case writes to: a whitelisting server, a persona, two LLMs."""

    server: m.Server
    persona: m.Persona
    llm: m.Llm
    other_llm: m.Llm


@pytest.fixture
def guild(world: World) -> Guild:
    server = world.server(channel_whitelist_enabled=True)
    return Guild(
        server, world.persona(server, name="speaker"), world.llm(), world.llm()
    )


def gated(layer: str, server_key: int) -> bool:
    """Tell whether the layer holds the server's gate (or whitelist rows)."""
    return registry.get(layer).peek(server_key) is not MISSING  # type: ignore[attr-defined]


# --------------------------------------------------------------- overrides


def _llm_row(g: Guild, channel: int) -> m.ChannelLlmOverride:
    return m.ChannelLlmOverride.objects.create(
        server=g.server, channel_disc_id=channel, llm=g.llm
    )


def _prompt_row(g: Guild, channel: int) -> m.ChannelPromptOverride:
    return m.ChannelPromptOverride.objects.create(
        server=g.server, channel_disc_id=channel, prompt="be brief"
    )


OVERRIDES: dict[str, tuple[Callable[..., Any], Callable[[Guild, int], Any]]] = {
    "channel_llm": (probes.channel_llm_override, _llm_row),
    "channel_prompt": (probes.channel_prompt_override, _prompt_row),
}


def _copy_of(row: Any, channel: int) -> Any:
    values = {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}
    values.update(id=None, channel_disc_id=channel)
    return type(row)(**values)


def _moved(path: str) -> Callable[[Any], None]:
    def move(row: Any) -> None:
        model = type(row)
        if path == "update":
            model.objects.filter(pk=row.pk).update(channel_disc_id=NEW)
            return
        row.channel_disc_id = NEW
        if path == "save":
            row.save()
        else:
            model.objects.bulk_update([row], ["channel_disc_id"])

    return move


#: path -> (the channel a row starts on, or None: no row; the write on it).
OVERRIDE_PATHS: dict[str, tuple[int | None, Callable[..., None]]] = {
    "create": (None, lambda make, g, row: make(g, NEW)),
    "bulk_create": (
        FAR,
        lambda make, g, row: type(row).objects.bulk_create([_copy_of(row, NEW)]),
    ),
    "save": (FAR, lambda make, g, row: _moved("save")(row)),
    "update": (FAR, lambda make, g, row: _moved("update")(row)),
    "bulk_update": (FAR, lambda make, g, row: _moved("bulk_update")(row)),
    "delete": (NEW, lambda make, g, row: row.delete()),
    "queryset_delete": (
        NEW,
        lambda make, g, row: type(row).objects.filter(pk=row.pk).delete(),
    ),
}


@pytest.mark.parametrize("path", sorted(OVERRIDE_PATHS))
@pytest.mark.parametrize("layer", sorted(OVERRIDES))
def test_a_write_drops_the_override_gate(
    layer: str,
    path: str,
    layers: Layers,
    guild: Guild,
    commit,
    django_assert_num_queries,
) -> None:
    read, make = OVERRIDES[layer]
    start, write = OVERRIDE_PATHS[path]
    row = None if start is None else make(guild, start)
    layers.warm(read(guild.server, SEEN))
    if path not in ("delete", "queryset_delete"):
        with django_assert_num_queries(0):  # the warm gate answers NEW too
            assert layers.read(read(guild.server, NEW)) is None
        registry.get(layer).invalidate((guild.server.pk, NEW))  # nothing kept
    with commit():
        write(make, guild, row)
    assert not gated(layer, guild.server.pk)
    served = layers.read(read(guild.server, NEW))
    assert served == layers.fresh(read(guild.server, NEW))
    assert (served is None) == path.endswith("delete")


# --------------------------------------------------------------- whitelist


@dataclass(frozen=True)
class RowsCase:
    """A server row change and the question it changes the answer to."""

    setup: Callable[[Guild], Any]
    write: Callable[[Guild, Any], object]
    probe: Callable[[Guild], Probe]


def _listed(g: Guild) -> m.WhitelistedChannel:
    return m.WhitelistedChannel.objects.create(server=g.server, channel_disc_id=NEW)


def _restricted(g: Guild) -> m.WhitelistedChannel:
    row = _listed(g)
    row.personas.add(g.persona)
    return row


def _role(g: Guild) -> m.WhitelistedRole:
    return m.WhitelistedRole.objects.create(server=g.server, role_disc_id=5)


def _new(g: Guild) -> Probe:
    return probes.whitelist(g.server, NEW, roles=[6])


def _flag(g: Guild, how: str) -> object:
    server = m.Server.objects.get(pk=g.server.pk)
    if how == "update":
        return m.Server.objects.filter(pk=server.pk).update(
            channel_whitelist_enabled=False
        )
    server.channel_whitelist_enabled = False
    if how == "save":
        return server.save()
    return m.Server.objects.bulk_update([server], ["channel_whitelist_enabled"])


def _cooldown(row: m.WhitelistedChannel, how: str) -> object:
    if how == "update":
        return type(row).objects.filter(pk=row.pk).update(cooldown_seconds=30)
    row.cooldown_type, row.cooldown_seconds = m.CooldownType.USER, 30
    if how == "save":
        return row.save()
    return type(row).objects.bulk_update([row], ["cooldown_type", "cooldown_seconds"])


ROWS: dict[str, RowsCase] = {
    "WhitelistedChannel-create": RowsCase(
        lambda g: None, lambda g, _: _listed(g), _new
    ),
    "WhitelistedChannel-bulk_create": RowsCase(
        lambda g: None,
        lambda g, _: m.WhitelistedChannel.objects.bulk_create(
            [m.WhitelistedChannel(server=g.server, channel_disc_id=NEW)]
        ),
        _new,
    ),
    **{
        f"WhitelistedChannel-{how}": RowsCase(
            _listed, lambda g, row, how=how: _cooldown(row, how), _new
        )
        for how in ("save", "update", "bulk_update")
    },
    "WhitelistedChannel-delete": RowsCase(_listed, lambda g, row: row.delete(), _new),
    "WhitelistedChannel-queryset_delete": RowsCase(
        _listed,
        lambda g, row: m.WhitelistedChannel.objects.filter(pk=row.pk).delete(),
        _new,
    ),
    "WhitelistedChannel-m2m:personas": RowsCase(
        _listed, lambda g, row: row.personas.add(g.persona), _new
    ),
    "WhitelistedRole-create": RowsCase(lambda g: None, lambda g, _: _role(g), _new),
    "WhitelistedRole-update": RowsCase(
        _role,
        lambda g, row: m.WhitelistedRole.objects.filter(pk=row.pk).update(
            role_disc_id=6
        ),
        _new,
    ),
    "WhitelistedRole-delete": RowsCase(_role, lambda g, row: row.delete(), _new),
    **{
        f"Server-{how}": RowsCase(_listed, lambda g, _, how=how: _flag(g, how), _new)
        for how in ("save", "update", "bulk_update")
    },
    "Persona-delete": RowsCase(
        _restricted,
        lambda g, _: m.Persona.objects.filter(pk=g.persona.pk).delete(),
        _new,
    ),
}


@pytest.mark.parametrize("case", sorted(ROWS))
def test_a_write_drops_the_servers_whitelist_rows(
    case: str, layers: Layers, guild: Guild, commit, django_assert_num_queries
) -> None:
    c = ROWS[case]
    row = c.setup(guild)
    layers.warm(probes.whitelist(guild.server, SEEN, roles=[6]))
    with django_assert_num_queries(0):  # a new question, decided from the rows
        layers.read(probes.whitelist(guild.server, SEEN + 100, roles=[6]))
    with commit():
        c.write(guild, row)
    assert not gated("channel_whitelist", guild.server.server_disc_id)
    served = layers.read(c.probe(guild))  # first asked now: from the new rows
    assert served == layers.fresh(c.probe(guild))


# --------------------------------------------------------------- other writers

WAIT = 30.0


@pytest.mark.django_db(transaction=True)
@pytest.mark.e2e
def test_an_override_added_in_another_process_reaches_the_gate(
    layers: Layers,
    world: World,
    redis_url: str,
    bus_channel: str,
    django_assert_num_queries,
) -> None:
    server, llm = world.server(), world.llm()
    here = bus.configure(redis_url=redis_url, channel=bus_channel)
    here.start_subscriber()
    assert here.stats.wait_for(lambda s: s["flushes"] >= 1, WAIT)
    layers.warm(probes.channel_llm_override(server, SEEN))
    with django_assert_num_queries(0):
        assert layers.read(probes.channel_llm_override(server, NEW)) is None

    run_in_another_process(
        "from tomori.domain.models import ChannelLlmOverride\n"
        f"ChannelLlmOverride.objects.create(server_id={server.pk}, "
        f"channel_disc_id={NEW}, llm_id={llm.pk})\n",
        redis_url=redis_url,
        channel=bus_channel,
    )

    assert here.stats.wait_for(lambda s: s["applied"] >= 1, WAIT)
    assert layers.read(probes.channel_llm_override(server, NEW)) == llm.pk


@pytest.mark.django_db(transaction=True)
def test_a_whitelisting_written_outside_django_reaches_the_rows(
    layers: Layers, world: World, django_assert_num_queries
) -> None:
    server = world.server(channel_whitelist_enabled=True)
    follower = registry_follower()
    follower.poll_once()  # starts at the newest row
    layers.warm(probes.whitelist(server, SEEN, roles=[]))
    with django_assert_num_queries(0):
        assert not layers.read(probes.whitelist(server, SEEN + 1, roles=[])).allowed

    client = outside_client()
    try:
        client.execute(
            "INSERT INTO channel_whitelist (server_id, channel_disc_id, "
            "cooldown_type, cooldown_seconds, created_at) "
            "VALUES (%s, %s, 'none', 0, now())",
            [server.pk, NEW],
        )
    finally:
        client.close()
    assert follower.poll_once() == 1

    assert not gated("channel_whitelist", server.server_disc_id)
    assert layers.read(probes.whitelist(server, NEW, roles=[])).allowed
