"""The rule table: every cache-feeding model has a rule, and rules speak the contract."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save

from caches import rules
from caches.invalidation import cache_feeding_models, connect_signals, describe
from caches.layers import declared_layers
from caches.registry import UnknownOperationError
from caches.rules import Event, change_events
from tomori.domain.models import CacheFeedingModel

# Every cache and operation a rule may name: the layers' own declarations.
CONTRACT_OPS = {
    name: set(layer.op_names()) - {"key", "all"}
    for name, layer in declared_layers().items()
}


class FakeLookup:
    """Answers lookups from dicts instead of the database."""

    def __init__(self, servers=None, users=None, presets=None):
        self.tables = {
            ("tomori.Server", "server_disc_id"): servers or {},
            ("tomori.User", "user_disc_id"): users or {},
            ("tomori.StPreset", "server_id"): presets or {},
        }

    def value(self, model, pk, attname):
        return self.tables[model, attname].get(pk)


def _concrete_cache_feeding_models():
    return [
        model
        for model in apps.get_models()
        if issubclass(model, CacheFeedingModel) and not model._meta.abstract
    ]


def test_every_cache_feeding_model_has_an_invalidation_rule():
    missing = [
        model._meta.label
        for model in _concrete_cache_feeding_models()
        if not rules.rules_for(model._meta.label)
    ]
    assert missing == [], f"models feeding a cache without a rule: {missing}"


def test_every_rule_names_a_cache_feeding_model_and_real_columns():
    for rule in rules.RULES:
        model = apps.get_model(rule.model)
        assert issubclass(model, CacheFeedingModel), rule.model
        columns = {f.attname for f in model._meta.concrete_fields}
        assert set(rule.reads) <= columns, rule
        assert set(rule.fields or ()) <= columns, rule
        for name in rule.m2m:
            assert model._meta.get_field(name).many_to_many, rule


def test_rules_emit_only_contract_caches_and_ops():
    lookup = FakeLookup({1: 100}, {2: 200}, {3: 1})
    for rule in rules.RULES:
        assert set(rule.caches) <= set(CONTRACT_OPS), rule
        model = apps.get_model(rule.model)
        row = {f.attname: 1 for f in model._meta.concrete_fields}
        row.update(server_id=1, user_id=2, preset_id=3)
        for event in rules.row_events(rule, row, lookup):
            assert event.cache in rule.caches, (rule, event)
            assert event.op in CONTRACT_OPS[event.cache] | {"key", "all"}, event


def test_connect_signals_is_idempotent_and_per_model():
    signals = (pre_save, post_save, pre_delete, post_delete)
    before = [len(signal.receivers) for signal in signals]
    connect_signals()
    connect_signals()
    assert [len(signal.receivers) for signal in signals] == before
    for model in cache_feeding_models():
        assert all(signal.has_listeners(model) for signal in signals), model


def test_models_feeding_no_cache_stay_fast_deletable():
    message_model = apps.get_model("tomori.PersonaSpriteMessage")
    assert not post_delete.has_listeners(message_model)
    assert not pre_delete.has_listeners(message_model)


def test_a_changed_key_emits_both_old_and_new():
    persona_rules = rules.rules_for("tomori.Persona")
    old = {"id": 5, "server_id": 1, "name": "a", "avatar_url": ""}
    new = {**old, "server_id": 2}
    events = change_events(
        persona_rules, old, new, FakeLookup({1: 100, 2: 200}), columns=list(old)
    )
    assert Event("tomori_state", "key", (100,)) in events
    assert Event("tomori_state", "key", (200,)) in events
    assert Event("webhook", "persona", (5,)) not in events  # avatar/name unchanged


def test_an_unchanged_row_emits_nothing():
    mcp_rules = rules.rules_for("tomori.GuildMcpServerConfig")
    old = {"id": 1, "server_id": 1, "tool_names": ["a"], "display_metadata": {}}
    new = {**old, "display_metadata": {"icon": "x"}}
    assert change_events(mcp_rules, old, new, FakeLookup(), columns=list(old)) == []


def test_a_lookup_that_finds_no_row_drops_the_whole_cache():
    persona_rules = rules.rules_for("tomori.Persona")
    row = {"id": 5, "server_id": 1, "name": "a", "avatar_url": ""}
    events = change_events(persona_rules, row, None, FakeLookup(), columns=list(row))
    assert Event("tomori_state", "all") in events


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (Event("tomori_state", "key", (123,)), "Tomori state of server 123"),
        (
            Event("channel_whitelist", "channel", (1, 2)),
            "channel whitelist of channel 2 and its threads in server 1",
        ),
        (
            Event("channel_prompt", "key", ((4, 5),)),
            "system prompt override of channel 5 in server #4",
        ),
        (Event("llm", "all"), "every entry of the llm cache"),
        (Event("mystery", "op", (1,)), "mystery: op(1)"),
    ],
)
def test_events_are_described_in_words(event, words):
    assert describe([event, event]) == [words]


def test_the_real_layers_accept_every_event_the_rules_emit():
    from caches.registry import registry

    lookup = FakeLookup({1: 100}, {2: 200}, {3: 1})
    for rule in rules.RULES:
        model = apps.get_model(rule.model)
        row = {f.attname: 1 for f in model._meta.concrete_fields}
        row.update(server_id=1, user_id=2, preset_id=3)
        for event in rules.row_events(rule, row, lookup):
            entry = registry.entry(event.cache)
            assert event.op in entry.op_names(), (event, entry.op_names())
            assert entry.invalidatable, event


def test_rules_make_events_only_through_declared_operations():
    layer = declared_layers()["tomori_state"]
    assert layer.op("key")(5) == Event("tomori_state", "key", (5,))
    with pytest.raises(UnknownOperationError, match="'tomori_state'.*'channel'"):
        layer.op("channel")
    with pytest.raises(TypeError, match="tomori_state.key"):
        layer.op("key")(1, 2)


def test_every_declared_operation_has_words():
    for name, layer in declared_layers().items():
        for op in layer.ops:
            words = describe([Event(name, op.name, (1,) * _arity(op.run))])
            assert words and ":" not in words[0].split(" ")[0], (name, op.name)


def _arity(fn):
    import inspect

    params = inspect.signature(fn).parameters.values()
    return sum(p.default is p.empty for p in params)
