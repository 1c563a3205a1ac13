"""Every write path of every model that feeds a layer reaches a real layer's invalidation.

The models and the write paths are derived from the layers' declarations
(`Layer.feeds`): a model that starts feeding a layer, or a feed that gains
many-to-many fields, needs a row here or `test_every_feeding_model_has_
every_write_path` fails. Each case warms a real layer through its public
getter (the second read makes no query), writes through one path inside a
committed block, and proves the layer dropped the entry (the next read asks
the database) and serves what the database holds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.db import connection, models
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from caches.layers import declared_layers
from tests.caches.invalidation import probes
from tests.caches.invalidation.conftest import Layers, Probe, World
from tests.caches.invalidation.test_write_paths import Fixture, _png
from tomori.domain import models as m

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres")]

PATHS = ("save", "update", "bulk_update", "delete", "queryset_delete", "bulk_create")


@dataclass(frozen=True)
class RowCase:
    """A stored row of one model, a read its change shows, and a change to make."""

    row: Callable[[Fixture], models.Model]
    probe: Callable[[Fixture, Any], Probe]
    change: Callable[[Fixture, Any], dict[str, Any]]
    #: Insert the row again (bulk_create) after the read was warmed without it
    #: (None: delete it first, warm, then bulk_create a copy).
    reinsert: Callable[[Fixture, Any], None] | None = None
    m2m: dict[str, Callable[[Fixture, Any], None]] = field(default_factory=dict)
    #: Whether a served value agrees with the database (None: it equals a
    #: read of the emptied layer).
    agrees: Callable[[Any], bool] | None = None


def _stored_webhook(f: Fixture) -> m.ManagedWebhook:
    Layers_read(f, probes.channel_webhook(66, f.server))  # the miss stores a row
    return m.ManagedWebhook.objects.get(channel_disc_id=66)


def Layers_read(f: Fixture, p: Probe) -> Any:  # noqa: N802 (a reader, not a class)
    return f.layers.read(p)


def _upsert_webhook(f: Fixture, row: m.ManagedWebhook) -> None:
    copy = _copy(row)
    copy.pk = None
    copy.webhook_disc_id = row.webhook_disc_id + 1
    m.ManagedWebhook.objects.bulk_create(
        [copy],
        update_conflicts=True,
        unique_fields=["channel_disc_id"],
        update_fields=["webhook_disc_id"],
    )


def _whitelisting(f: Fixture) -> m.Server:
    m.Server.objects.filter(pk=f.server.pk).update(channel_whitelist_enabled=True)
    return f.server


CASES: dict[str, RowCase] = {
    "tomori.Server": RowCase(
        lambda f: f.server,
        lambda f, row: probes.blacklisted(row, f.user),
        lambda f, row: {"server_disc_id": row.server_disc_id + 1},
    ),
    "tomori.ServerModelConfig": RowCase(
        lambda f: m.ServerModelConfig.objects.create(server=f.server, api_key="k"),
        lambda f, row: probes.state(f.server),
        lambda f, row: {"temperature": 0.5},
    ),
    "tomori.Persona": RowCase(
        lambda f: f.persona,
        lambda f, row: probes.state(f.server),
        lambda f, row: {"name": "renamed"},
    ),
    "tomori.ServerExpression": RowCase(
        lambda f: m.ServerExpression.objects.create(
            server=f.server, kind="emoji", expression_disc_id=10**17 + 7, name="e"
        ),
        lambda f, row: probes.expressions(f.server),
        lambda f, row: {"name": "renamed"},
    ),
    "tomori.ServerExpressionSync": RowCase(
        lambda f: m.ServerExpressionSync.objects.create(server=f.server),
        lambda f, row: probes.expressions(f.server),
        lambda f, row: {"emoji_count": 5},
    ),
    "tomori.WhitelistedChannel": RowCase(
        lambda f: m.WhitelistedChannel.objects.create(
            server=_whitelisting(f), channel_disc_id=21
        ),
        lambda f, row: probes.whitelist(f.server, 21),
        lambda f, row: {"cooldown_seconds": 30},
        m2m={"personas": lambda f, row: row.personas.add(f.persona)},
    ),
    "tomori.WhitelistedRole": RowCase(
        lambda f: m.WhitelistedRole.objects.create(
            server=_whitelisting(f), role_disc_id=6
        ),
        lambda f, row: probes.whitelist(f.server, 62, roles=[5]),
        lambda f, row: {"role_disc_id": 5},
    ),
    "tomori.ChannelLlmOverride": RowCase(
        lambda f: m.ChannelLlmOverride.objects.create(
            server=f.server, channel_disc_id=63, llm=f.llm
        ),
        lambda f, row: probes.channel_llm_override(f.server, 63),
        lambda f, row: {"llm_id": f.world.llm().pk},
    ),
    "tomori.ChannelPromptOverride": RowCase(
        lambda f: m.ChannelPromptOverride.objects.create(
            server=f.server, channel_disc_id=64, prompt="p"
        ),
        lambda f, row: probes.channel_prompt_override(f.server, 64),
        lambda f, row: {"prompt": "q"},
    ),
    "tomori.GuildMcpServerConfig": RowCase(
        lambda f: f.mcp,
        lambda f, row: probes.mcp_configs(f.server),
        lambda f, row: {"enabled": False},
    ),
    "tomori.NovelAiSubscription": RowCase(
        lambda f: m.NovelAiSubscription.objects.create(
            server=f.server, tier="opus", context_limit=8192
        ),
        lambda f, row: probes.novelai(f.server),
        lambda f, row: {"tier": "tablet"},
    ),
    "tomori.PersonalSpotlight": RowCase(
        lambda f: m.PersonalSpotlight.objects.create(
            server=f.server, user=f.user, channel_disc_id=65, persona=f.persona
        ),
        lambda f, row: probes.spotlight(f.server, f.user, 65),
        lambda f, row: {"expires_at": timezone.now() + dt.timedelta(days=1)},
    ),
    "tomori.StPreset": RowCase(
        lambda f: f.st,
        lambda f, row: probes.active_st_preset(f.server),
        lambda f, row: {"name": "renamed"},
    ),
    "tomori.StPresetNode": RowCase(
        lambda f: m.StPresetNode.objects.create(preset=f.st, content="hello"),
        lambda f, row: probes.active_st_preset(f.server),
        lambda f, row: {"content": "bye"},
    ),
    "tomori.PersonaSprite": RowCase(
        lambda f: m.PersonaSprite.objects.create(
            persona=f.persona, name="wave", image_url="http://x/1"
        ),
        lambda f, row: probes.sprites(f.persona.pk),
        lambda f, row: {"name": "smile"},
    ),
    "tomori.ManagedWebhook": RowCase(
        _stored_webhook,
        lambda f, row: probes.channel_webhook(66, f.server),
        lambda f, row: {"webhook_disc_id": row.webhook_disc_id + 1},
        reinsert=_upsert_webhook,
        # A read of the emptied layer asks Discord for a new webhook: compare
        # with the stored row instead.
        agrees=lambda served: (
            served.webhook_disc_id
            == m.ManagedWebhook.objects.get(channel_disc_id=66).webhook_disc_id
        ),
    ),
    "tomori.User": RowCase(
        lambda f: f.user,
        lambda f, row: probes.user_row(f.user),
        lambda f, row: {"language": "fr"},
    ),
    "tomori.UserBlacklist": RowCase(
        lambda f: m.UserBlacklist.objects.create(server=f.server, user=f.user),
        lambda f, row: probes.blacklisted(f.server, f.user),
        lambda f, row: {"user_id": f.world.user().pk},
    ),
    "tomori.Llm": RowCase(
        lambda f: f.llm,
        lambda f, row: probes.llm_row(f.llm),
        lambda f, row: {"is_default": True},
    ),
    "tomori.PresetPersona": RowCase(
        lambda f: f.preset,
        lambda f, row: probes.preset_avatar_of(f.preset),
        lambda f, row: {"avatar_path": _png(f.tmp_path, "new.png", b"new")},
    ),
}


def _feeding() -> dict[str, set[str]]:
    """Return {model label: its m2m fields that feed a layer} from the declarations."""
    fed: dict[str, set[str]] = {}
    for layer in declared_layers().values():
        for feed in layer.feeds:
            fed.setdefault(feed.model, set()).update(feed.m2m)
    return fed


def _paths(label: str) -> list[str]:
    return [*PATHS, *(f"m2m:{name}" for name in sorted(_feeding().get(label, ())))]


def test_every_feeding_model_has_every_write_path() -> None:
    fed = _feeding()
    assert set(CASES) == set(fed), "a model feeding a layer needs a RowCase here"
    for label, m2m in fed.items():
        assert set(CASES[label].m2m) == m2m, label


def _copy(row: models.Model) -> models.Model:
    """Return an unsaved copy of `row`, primary key included."""
    values = {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}
    return type(row)(**values)


def _write(path: str, f: Fixture, case: RowCase, row: models.Model) -> None:
    model = type(row)
    change = case.change(f, row)
    if path == "update":
        model._default_manager.filter(pk=row.pk).update(**change)
        return
    if path in ("save", "bulk_update"):
        for name, value in change.items():
            setattr(row, name, value)
        if path == "save":
            row.save()
        else:
            model._default_manager.bulk_update([row], list(change))
        return
    if path == "delete":
        row.delete()
    elif path == "queryset_delete":
        model._default_manager.filter(pk=row.pk).delete()
    elif path.startswith("m2m:"):
        case.m2m[path.removeprefix("m2m:")](f, row)
    else:
        raise AssertionError(path)


MATRIX = [
    pytest.param(label, path, id=f"{label.removeprefix('tomori.')}-{path}")
    for label in sorted(CASES)
    for path in _paths(label)
]


@pytest.mark.parametrize(("label", "path"), MATRIX)
def test_the_write_path_invalidates_a_real_layer(
    label: str, path: str, layers: Layers, world: World, commit, tmp_path: Path
) -> None:
    f = Fixture(world, tmp_path)
    f.world, f.layers = world, layers  # type: ignore[attr-defined]
    case = CASES[label]
    row = case.row(f)
    assert type(row) is apps.get_model(label)
    read = case.probe(f, row)
    if path == "bulk_create":
        copy = _copy(row)
        if case.reinsert is None:
            type(row)._default_manager.filter(pk=row.pk).delete()
        layers.warm(read)
        with commit():
            if case.reinsert is None:
                type(row)._default_manager.bulk_create([copy])
            else:
                case.reinsert(f, row)
    else:
        layers.warm(read)
        with commit():
            _write(path, f, case, row)

    with CaptureQueriesContext(connection) as queries:
        served = layers.read(read)
    assert len(queries) > 0, f"{label} {path}: the layer kept serving its entry"
    if case.agrees is None:
        assert served == layers.fresh(read)
    else:
        assert case.agrees(served)
