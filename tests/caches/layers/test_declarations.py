"""Each layer declares itself once; the registry is built from the declarations."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from caches.layers import (
    build_registry,
    declared,
    declared_layers,
    layer_modules,
    layer_of,
    layers_reading,
    st_preset,
    tomori_state,
    user,
)
from caches.layers._maps import LayerMaps, LayerNotBuilt
from caches.layers._support import knob
from caches.layers.declaration import (
    KeyShape,
    Layer,
    UndeclaredSettingError,
)
from caches.registry import (
    CacheRegistry,
    EmergencyPolicy,
    UnknownCacheError,
    registry,
)
from tomori.bot.pipeline import PIPELINE_LAYERS
from tomori.bot.pipeline.discord_events import guild_events
from tomori.domain.knobs import knobs  # noqa: F401


def caps_of(name: str) -> set[int]:
    """Return the caps of a layer's member maps (its own cap when it has one map)."""
    stats: dict[str, Any] = registry.get(name).stats()
    return set((stats.get("member_caps") or {"primary": stats["cap"]}).values())


def test_every_layer_module_declares_one_layer_under_its_name() -> None:
    assert list(declared_layers()) == layer_modules()
    for name, layer in declared_layers().items():
        assert layer.name == name and layer.description and layer.key.help


def test_the_built_registry_holds_every_declared_layer_and_nothing_else() -> None:
    registry.register("stray", registry.get("user"), policy="clear")
    assert build_registry() == list(declared_layers())
    for name, layer in declared_layers().items():
        entry = registry.entry(name)
        assert entry.layer is layer
        assert (entry.policy, entry.invalidatable) == (
            layer.policy,
            layer.invalidatable,
        )
        assert entry.op_names() == layer.op_names()


def test_building_makes_new_empty_caches() -> None:
    registry.get("user").set(1, None)  # type: ignore[attr-defined]
    before = user._layer.cache
    build_registry()
    assert user._layer.cache is not before and len(registry.get("user")) == 0
    assert registry.get("user") is user._layer.cache


@pytest.mark.parametrize(
    ("name", "setting"),
    [
        (layer.name, setting)
        for layer in declared_layers().values()
        for setting in layer.settings
        if setting.endswith("_MAX_ENTRIES")
    ],
)
def test_override_settings_on_a_cap_rebuilds_the_layer_with_it(
    name: str, setting: str
) -> None:
    cap = int(knob(setting)) + 7
    with override_settings(**{setting: cap}):
        assert cap in caps_of(name)
    assert cap not in caps_of(name)


@pytest.mark.parametrize(
    ("name", "setting"),
    [
        (layer.name, setting)
        for layer in declared_layers().values()
        for setting in layer.settings
        if setting.endswith(("_TTL_MINUTES", "_TTL_HOURS"))
    ],
)
def test_override_settings_on_a_ttl_rebuilds_the_layer_with_it(
    name: str, setting: str
) -> None:
    before = registry.get(name).stats()["ttl"]
    with override_settings(**{setting: int(knob(setting)) * 2}):
        during = registry.get(name).stats()["ttl"]
    # The store reports its crude-entry ttl, not the summary one.
    assert during == before * 2 or setting == "SHORT_TERM_MEMORY_SUMMARY_TTL_HOURS"
    assert registry.get(name).stats()["ttl"] == before


def test_a_setting_change_rebuilds_only_the_layers_built_from_it() -> None:
    registry.get("user").set(5, None)  # type: ignore[attr-defined]
    with override_settings(TOMORI_STATE_CACHE_MAX_ENTRIES=3):
        assert len(registry.get("user")) == 1
    assert [
        layer.name for layer in layers_reading("CHANNEL_LLM_CACHE_MAX_ENTRIES")
    ] == ["channel_llm"]
    assert layers_reading("LOG_LEVEL") == []


def test_every_declared_setting_is_a_knob() -> None:
    from tomori.domain.knobs import KNOBS_BY_NAME

    for layer in declared_layers().values():
        own = {k.name for k in layer.knobs}
        assert set(layer.settings) <= set(KNOBS_BY_NAME) | own, layer.name


# Cache caps and TTLs of the layers' knob groups that no layer declares, and why.
UNDECLARED_CACHE_KNOBS = {
    # A per-entry TTL read when a failure is remembered (caches/layers/webhook.py),
    # not when the layer is built: a change applies at the next failure.
    "WEBHOOK_FAILURE_CACHE_TTL_MINUTES",
}


def test_every_cache_cap_and_ttl_knob_is_declared_by_a_layer() -> None:
    from tomori.domain.knobs import KNOBS
    from tomori.domain.knobs.cache_layers import (
        CacheKnobs,
        PersonaSpriteKnobs,
        ShortTermMemoryKnobs,
    )

    groups = {CacheKnobs.GROUP, ShortTermMemoryKnobs.GROUP, PersonaSpriteKnobs.GROUP}
    caps_and_ttls = {
        knob.name
        for knob in KNOBS
        if knob.group in groups
        and (knob.name.endswith("_MAX_ENTRIES") or "_TTL_" in knob.name)
    }
    declared = {name for layer in declared_layers().values() for name in layer.settings}
    assert len(caps_and_ttls) > 30
    assert caps_and_ttls - declared == UNDECLARED_CACHE_KNOBS


def test_a_build_may_read_only_declared_settings() -> None:
    def build(config: Any) -> Any:
        return config.cache("probe", cap="USER_CACHE_MAX_ENTRIES", ttl=None)

    probe = Layer(
        name="probe",
        description="a layer reading a setting it does not declare",
        policy=EmergencyPolicy.CLEAR,
        key=KeyShape(help="anything"),
        build=build,
        settings=("TOMORI_STATE_CACHE_MAX_ENTRIES",),
    )
    with pytest.raises(UndeclaredSettingError, match="USER_CACHE_MAX_ENTRIES"):
        probe.build(probe.settings_reader(lambda name: getattr(knobs(), name)))


def test_an_unbuilt_layer_says_so() -> None:
    unbuilt = type(user._layer)("user", cap=user.CAP_SETTING, ttl=user.TTL_SETTING)
    with pytest.raises(LayerNotBuilt, match="'user'.*build_registry"):
        unbuilt.cache.get(1)


def test_a_misspelt_attribute_of_a_layer_object_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="chache"):
        user._layer.chache  # type: ignore[attr-defined]  # noqa: B018


def test_every_layer_module_reads_its_maps_from_the_object_its_build_fills() -> None:
    for layer in declared_layers().values():
        owner = getattr(layer.build, "__self__", None)
        assert isinstance(owner, LayerMaps), layer.name
        assert owner.name == layer.name
        # Built, its class has no __getattr__: map reads stay plain slot reads.
        assert not hasattr(type(owner), "__getattr__"), layer.name


def test_a_read_function_names_its_layer() -> None:
    assert layer_of(tomori_state.get_cached_tomori_state) is tomori_state.LAYER
    assert layer_of(st_preset.get_cached_st_preset) is st_preset.LAYER  # a method
    with pytest.raises(UnknownCacheError, match="builtins"):
        layer_of(len)


def test_an_operation_must_exist_when_it_is_bound() -> None:
    assert declared("user").op("blacklist")(1, 2).args == (1, 2)
    with pytest.raises(KeyError, match="no operation 'channel'"):
        declared("user").op("channel")
    with pytest.raises(ValueError, match="bad operation names"):
        Layer(
            name="probe",
            description="shadows a built-in",
            policy=EmergencyPolicy.CLEAR,
            key=KeyShape(help="anything"),
            build=lambda _c: registry.get("user"),
            ops=(
                declared("user")
                .operation("blacklist")
                .__class__("key", lambda k: 0, description="", phrase=str),
            ),
        )


def test_a_separate_registry_can_be_built() -> None:
    other = CacheRegistry()
    build_registry(into=other)
    assert other.names() == list(declared_layers())


def test_leaving_a_guild_reaches_every_layer_that_declares_guild_scope() -> None:
    events = guild_events(123, 7)
    scoped = [layer for layer in declared_layers().values() if layer.guild]
    assert {event.cache for event in events} == {layer.name for layer in scoped}
    assert tomori_state.LAYER.event("key", 123) in events
    assert all(event.cache != "channel_llm" for event in guild_events(123, None))


def test_the_pipeline_names_only_declared_layers() -> None:
    assert set(PIPELINE_LAYERS) <= set(declared_layers())
