"""The objects that own a layer's maps, built from its settings.

Each layer module holds one such object from import on (its `_layer`) and
declares `build=_layer.build`. The registry's build (`caches.layers.
build_registry`, at `AppConfig.ready()`; `rebuild_layers_reading` on
`setting_changed`) calls it: every map is made afresh from the current
settings (the subclass's `make`) and the one the registry holds is returned. The object is never
replaced, so the module's read functions reach its maps as `_layer.cache`:
a module global and a slot, no lookup by name. Before the first build the
maps are absent, and reading one raises `LayerNotBuilt`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Generic, NoReturn, TypeVar

from caches.core import BoundedTTLCache, ScopeSpec
from caches.layers.declaration import LayerSettings
from caches.registry import ManagedCache

K = TypeVar("K")
V = TypeVar("V")


class LayerNotBuilt(RuntimeError):
    """A layer's cache was used before the registry was built."""


class LayerMaps:
    """One layer's maps (named in each subclass's `__slots__`), made by `make`.

    Until its first build the object's class is an "unbuilt" subclass of its
    own whose `__getattr__` answers a map not made yet with LayerNotBuilt;
    the build gives the object its own class back. So a built layer's reads
    are plain slot reads: CPython does not specialise attribute reads on a
    class with a `__getattr__` (about 20 ns more per map read, measured).
    """

    __slots__ = ("name",)
    #: On an unbuilt subclass: the class the first build gives the object.
    built_kind: ClassVar[type[LayerMaps] | None] = None

    def __init__(self, name: str) -> None:
        self.name = name
        object.__setattr__(self, "__class__", _unbuilt_kind(type(self)))

    def build(self, config: LayerSettings) -> ManagedCache:
        """Make every map afresh from `config`; return the one the registry holds."""
        held = self.make(config)
        object.__setattr__(self, "__class__", type(self).built_kind or type(self))
        return held

    def make(self, config: LayerSettings) -> ManagedCache:
        """Make every map from `config`; return the one the registry holds."""
        raise NotImplementedError


_UNBUILT: dict[type[LayerMaps], type[LayerMaps]] = {}


def _unbuilt_kind(cls: type[LayerMaps]) -> type[LayerMaps]:
    """Return `cls`'s unbuilt subclass (made once per class)."""
    if cls.built_kind is not None:
        return cls
    if cls not in _UNBUILT:
        _UNBUILT[cls] = type(
            f"Unbuilt{cls.__name__}",
            (cls,),
            {"__slots__": (), "__getattr__": _not_built, "built_kind": cls},
        )
    return _UNBUILT[cls]


def _not_built(self: LayerMaps, attr: str) -> NoReturn:
    # Reached only when normal lookup fails: a slot (a map) not set yet is a
    # use before the first build; anything else is a plain miss.
    if attr != "name" and _is_slot(type(self), attr):
        raise LayerNotBuilt(
            f"cache layer {self.name!r} is used before the registry is built "
            "(caches.layers.build_registry(); AppConfig.ready() runs it)"
        )
    raise AttributeError(f"{type(self).__name__!r} has no attribute {attr!r}")


def _is_slot(cls: type, attr: str) -> bool:
    return any(attr in getattr(klass, "__slots__", ()) for klass in cls.__mro__)


class OneMap(LayerMaps, Generic[K, V]):
    """A layer whose maps are one: `cache`, capped and timed by two settings.

    `ttl` names a setting in minutes (None: entries never expire); `scopes`
    are the map's scope indexes.
    """

    __slots__ = ("cap_setting", "ttl_setting", "scopes", "cache")
    cache: BoundedTTLCache[K, V]

    def __init__(
        self,
        name: str,
        *,
        cap: str,
        ttl: str | None,
        scopes: Mapping[str, ScopeSpec] | None = None,
    ) -> None:
        super().__init__(name)
        self.cap_setting = cap
        self.ttl_setting = ttl
        self.scopes = scopes

    def make(self, config: LayerSettings) -> BoundedTTLCache[K, V]:
        """Make the map from the cap and TTL settings."""
        self.cache = config.cache(
            self.name, cap=self.cap_setting, ttl=self.ttl(config), scopes=self.scopes
        )
        return self.cache

    def ttl(self, config: LayerSettings) -> float | None:
        """Return the map's TTL in seconds (None: no TTL)."""
        return None if self.ttl_setting is None else config.minutes(self.ttl_setting)
