"""Cache layers, one module per layer of the spec, each declaring its `LAYER`.

Importing a layer builds nothing. `build_registry()` builds every declared
layer's caches from settings and registers them (`AppConfig.ready()` runs it
in every process; the test suite runs it before each test), and
`rebuild_layers_reading(setting)` rebuilds those a changed setting feeds.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable, Iterable
from typing import Any

from caches.layers._maps import LayerMaps
from caches.layers.declaration import Layer
from caches.registry import CacheRegistry, UnknownCacheError, registry

logger = logging.getLogger(__name__)

#: Modules of this package that are not layers (besides `_private` ones).
NOT_LAYERS = frozenset({"declaration"})

_declared: dict[str, Layer] = {}


def layer_modules() -> list[str]:
    """Return the names of every layer module in this package."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_") and m.name not in NOT_LAYERS
    )


def load_all(*, strict: bool = True) -> list[str]:
    """Import every layer module and note its declaration; return the modules loaded.

    strict=False (the admin) logs a layer that fails to import and goes on.
    A module without a `LAYER` is an error either way.
    """
    loaded = []
    for name in layer_modules():
        try:
            module = importlib.import_module(f"{__name__}.{name}")
            layer = _declaration_of(module, name)
        except Exception:
            if strict:
                raise
            logger.exception("could not import cache layer %s", name)
            continue
        _declared[layer.name] = layer
        loaded.append(name)
    return loaded


def _declaration_of(module: Any, name: str) -> Layer:
    layer = getattr(module, "LAYER", None)
    if not isinstance(layer, Layer):
        raise TypeError(f"cache layer module {name} declares no LAYER = Layer(...)")
    if layer.name != name:
        raise ValueError(f"layer module {name} declares the name {layer.name!r}")
    return layer


def declared_layers() -> dict[str, Layer]:
    """Return every declared layer by name, in module order (loading them once)."""
    if not _declared:
        load_all(strict=False)
    return dict(_declared)


def declared(name: str) -> Layer:
    """Return the declaration of layer `name`, or raise UnknownCacheError."""
    if not _declared:
        load_all(strict=False)
    try:
        return _declared[name]
    except KeyError:
        raise UnknownCacheError(name, list(_declared)) from None


def _read_setting(name: str) -> Any:
    from caches.layers._support import knob

    return knob(name)


def build_layer(
    layer: Layer,
    *,
    into: CacheRegistry | None = None,
    read: Callable[[str], Any] = _read_setting,
) -> None:
    """Build one layer's caches from settings and register them (replacing old ones)."""
    cache = layer.build(layer.settings_reader(read))
    (into or registry).register_layer(layer, cache)


def build_registry(*, into: CacheRegistry | None = None) -> list[str]:
    """Empty the registry and fill it with freshly built caches of every layer.

    Returns the names built. Caches registered by hand (the catalogs, at
    worker start) are dropped: whoever registered them registers them again.
    """
    target = into or registry
    target.reset()
    for layer in declared_layers().values():
        build_layer(layer, into=target)
    return target.names()


def ensure_registry() -> list[str]:
    """Build the registry unless every declared layer is already in it."""
    if all(name in registry for name in declared_layers()):
        return registry.names()
    return build_registry()


def layers_reading(setting: str) -> list[Layer]:
    """Return the layers whose caches are built from `setting`."""
    return [layer for layer in declared_layers().values() if setting in layer.settings]


def rebuild_layers_reading(setting: str) -> list[str]:
    """Rebuild (empty, from current settings) the layers `setting` feeds; return names.

    Layers this process has not built are left alone.
    """
    rebuilt = [layer for layer in layers_reading(setting) if layer.name in registry]
    for layer in rebuilt:
        build_layer(layer)
    return [layer.name for layer in rebuilt]


def layer_of(read: Callable[..., Any]) -> Layer:
    """Return the declaration of the layer a read function belongs to.

    A bound method of a layer object (`caches.layers._maps`) belongs to that
    object's layer, any other function to the layer module defining it; one
    that belongs to no layer raises UnknownCacheError.
    """
    owner = getattr(read, "__self__", None)
    if isinstance(owner, LayerMaps):
        return declared(owner.name)
    module = read.__module__.removeprefix(f"{__name__}.")
    return declared(module.split(".")[0])


def layer_names(layers: Iterable[Layer]) -> tuple[str, ...]:
    """Return the names of `layers`, in order."""
    return tuple(layer.name for layer in layers)
