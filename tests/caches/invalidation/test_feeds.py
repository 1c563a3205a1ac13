"""Every layer declares what feeds it, and the invalidation rules are derived from that.

A layer that loads from the database and can go stale must name the tables
that feed it; one that needs no invalidation must say why. Dropping a
layer's `feeds` fails here, not silently in production.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from django.apps import apps

from caches import rules
from caches.layers import declared_layers
from caches.layers._feeds import Feed, NotFed
from caches.layers.declaration import Layer

#: Why a layer that reads a table may need no feed.
READS_A_TABLE_UNFED = {NotFed.IMMUTABLE, NotFed.TURN_WRITTEN}


def _sources(layer: Layer) -> list[Path]:
    """Return the source files of the layer's module (a package: all of it)."""
    module = inspect.getmodule(layer.build)
    path = Path(inspect.getfile(module))  # type: ignore[arg-type]
    layer_dir = Path(rules.__file__).parent / "layers"
    package = layer_dir / layer.name
    if package.is_dir():
        return sorted(package.glob("*.py"))
    return [layer_dir / f"{layer.name}.py", path]


def _reads_tables(layer: Layer) -> bool:
    """Return whether the layer's code imports a repository (it loads rows)."""
    for source in _sources(layer):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module + "." + alias.name for alias in node.names]
                if any(
                    ".repositories." in name and not name.endswith(".population")
                    for name in names
                ):
                    return True
    return False


LAYERS = sorted(declared_layers().values(), key=lambda layer: layer.name)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_every_layer_declares_its_feeds_or_why_it_has_none(layer: Layer) -> None:
    assert bool(layer.feeds) != (layer.not_fed is not None), (
        f"layer {layer.name} must declare either feeds=(Feed(...), ...) "
        "(the tables whose changes invalidate it) or not_fed=NotFed.<reason>"
    )


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_a_layer_that_loads_rows_declares_the_tables_that_feed_it(
    layer: Layer,
) -> None:
    if not _reads_tables(layer) or layer.feeds:
        return
    assert layer.not_fed in READS_A_TABLE_UNFED, (
        f"layer {layer.name} loads rows from the database but declares no "
        f"feeds: a write to its tables would never invalidate it "
        f"(declared reason: {layer.not_fed})"
    )


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_a_layer_no_write_can_invalidate_has_no_feeds(layer: Layer) -> None:
    if not layer.invalidatable:
        assert layer.feeds == () and layer.not_fed is not None, layer.name


def test_the_reading_detector_sees_a_layer_that_loads_rows() -> None:
    layers = declared_layers()
    assert _reads_tables(layers["tomori_state"])
    assert _reads_tables(layers["channel_llm"])  # a shared kind's module
    assert _reads_tables(layers["short_term_memory"])  # a package
    assert not _reads_tables(layers["gemini_capability"])


def test_every_feed_becomes_exactly_one_rule() -> None:
    declared = [(layer.name, feed) for layer in LAYERS for feed in layer.feeds]
    derived = [(rule.caches[0], rule.model) for rule in rules.RULES]
    assert sorted(derived) == sorted((name, feed.model) for name, feed in declared)


def test_every_feed_names_a_model_and_its_columns() -> None:
    for layer in LAYERS:
        for feed in layer.feeds:
            model = apps.get_model(feed.model)
            columns = {f.attname for f in model._meta.concrete_fields}
            assert set(feed.reads) | set(feed.fields or ()) <= columns, feed
            for via in feed.vias:
                target = apps.get_model(via.model)
                assert via.attname in {f.attname for f in target._meta.fields}


def test_a_feed_with_the_wrong_arity_fails_its_declaration() -> None:
    layer = declared_layers()["tomori_state"]
    bad = Feed("tomori.Server", "key", ("id", "server_disc_id"))
    with pytest.raises(TypeError, match="tomori_state.*2 arguments to 'key'"):
        layer.feed_op(bad)


def test_the_lookup_models_are_the_ones_feeds_read_through() -> None:
    assert {"tomori.Server", "tomori.StPreset"} == rules.LOOKUP_MODELS
