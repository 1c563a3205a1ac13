"""A layer may declare the knobs only it reads: they are read, checked and documented."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core import checks
from django.test import override_settings

from caches import layers as layers_pkg
from caches.layers import build_layer
from caches.layers._knobs import layer_cap, layer_minutes, own_knobs
from caches.layers._support import parse_int
from caches.layers.declaration import KeyShape, Layer, LayerSettings
from caches.registry import CacheRegistry, EmergencyPolicy
from tomori.management.commands.settings_doc import rendered_doc

CAP = "OWN_KNOB_PROBE_CACHE_MAX_ENTRIES"
TTL = "OWN_KNOB_PROBE_CACHE_TTL_MINUTES"


def _build(config: LayerSettings):  # type: ignore[no-untyped-def]
    return config.cache("own_knob_probe", cap=CAP, ttl=config.minutes(TTL))


BANNER = Layer(
    name="own_knob_probe",
    description="A layer that exists only in this test.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(help="server_id", parse=parse_int),
    build=_build,
    knobs=(
        layer_cap(CAP, 500, "probe cache"),
        layer_minutes(TTL, 10, "How long a probe entry is served."),
    ),
    not_fed=None,
)


@pytest.fixture
def banner() -> Iterator[Layer]:
    layers_pkg.declared_layers()  # load the real ones first
    assert BANNER.name not in layers_pkg._declared  # never shadow a real layer
    layers_pkg._declared[BANNER.name] = BANNER
    yield BANNER
    del layers_pkg._declared[BANNER.name]


def cap_after_build(layer: Layer) -> int:
    target = CacheRegistry()
    build_layer(layer, into=target)
    return int(target.get(layer.name).stats()["cap"])


def test_a_layers_own_knobs_join_its_settings(banner: Layer) -> None:
    assert banner.settings == (CAP, TTL)
    assert set(own_knobs()) >= {CAP, TTL}


def test_an_own_knob_reads_the_environment_then_an_override(
    banner: Layer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cap_after_build(banner) == 500
    monkeypatch.setenv(CAP, "77")
    assert cap_after_build(banner) == 77
    with override_settings(**{CAP: 12}):
        assert cap_after_build(banner) == 12


def test_a_malformed_own_knob_stops_start_up_naming_the_variable(
    banner: Layer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAP, "lots")
    errors = [e for e in checks.run_checks() if e.id == "caches.E001"]
    assert any(CAP in e.msg for e in errors), errors
    assert cap_after_build(banner) == 500  # the default until fixed


def test_the_settings_doc_lists_an_own_knob_and_its_layer(banner: Layer) -> None:
    doc = rendered_doc()
    row = next(line for line in doc.splitlines() if f"`{CAP}`" in line)
    assert "`500`" in row and "own_knob_probe" in row
