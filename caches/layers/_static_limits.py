"""A static token-limit map served through a cache, for the provider capability layers.

`StaticLimitLayer` is a whole provider layer: its table, lookup cache and
declaration (keyed by `static_limit_key`).
The table is code, so the cache in front of it is refilled from the table on
a miss: clearing it (an operator, or a test's `registry.clear_all()`) frees
memory and loses nothing. Lookups normalise the model name (lowercase, no
"models/" or provider prefix) and fall back to the longest known name the
model's name starts with ("gemini-2.5-flash-preview-09-2025" ->
"gemini-2.5-flash"), so dated variants resolve without a table change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from caches.core import MISSING, BoundedTTLCache
from caches.layers._feeds import NotFed
from caches.layers._maps import LayerMaps
from caches.layers.declaration import KeyShape, Layer, LayerSettings
from caches.registry import EmergencyPolicy

#: Distinct names remembered (known and unknown) per map.
MAX_NAMES = 512


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """A model's context window and largest output, in tokens."""

    input_tokens: int
    output_tokens: int


class StaticLimitLayer(LayerMaps):
    """A provider's read-only name -> TokenLimits table behind a bounded lookup cache.

    `layer` is its declaration: preserved in an emergency and not
    invalidatable, since the table is code (no write can make an entry stale,
    and a clear would only cost refills).
    """

    __slots__ = ("table", "prefixes", "layer", "cache")
    cache: BoundedTTLCache[str, TokenLimits | None]

    def __init__(
        self,
        name: str,
        table: Mapping[str, TokenLimits],
        *,
        prefixes: tuple[str, ...],
        example: str,
        description: str,
    ) -> None:
        """`example`: a model name for the key's help."""
        super().__init__(name)
        self.table = MappingProxyType(dict(table))
        self.prefixes = prefixes
        self.layer = Layer(
            name=name,
            description=description,
            policy=EmergencyPolicy.PRESERVE,
            invalidatable=False,
            key=static_limit_key(prefixes, example=example),
            not_fed=NotFed.STATIC,
            build=self.build,
        )

    def make(self, config: LayerSettings) -> BoundedTTLCache[str, TokenLimits | None]:
        """Make the lookup cache (it reads no setting: MAX_NAMES, no TTL)."""
        self.cache = BoundedTTLCache(self.name, maxsize=MAX_NAMES, ttl=None)
        return self.cache

    def normalise(self, model: str) -> str:
        """Return the lookup form of a model name."""
        return normalise_model(model, self.prefixes)

    def resolve(self, name: str) -> TokenLimits | None:
        """Return the limits of a normalised name from the table (no cache)."""
        if name in self.table:
            return self.table[name]
        candidates = [k for k in self.table if name.startswith(k + "-")]
        return self.table[max(candidates, key=len)] if candidates else None

    def lookup(self, model: str) -> TokenLimits | None:
        """Return the model's limits, or None when it is not a known model."""
        name = self.normalise(model)
        value = self.cache.get(name)
        if value is MISSING:
            value = self.resolve(name)
            self.cache.set(name, value)
        return value


def normalise_model(model: str, prefixes: tuple[str, ...]) -> str:
    """Return the lookup form of a model name: lowercase, provider prefixes removed."""
    name = model.strip().lower()
    for prefix in prefixes:
        name = name.removeprefix(prefix)
    return name


def static_limit_key(prefixes: tuple[str, ...], *, example: str) -> KeyShape:
    """Return the key shape of a provider's map: a normalised model name."""

    def parse(text: str) -> str:
        name = normalise_model(text, prefixes)
        if not name:
            raise ValueError("the model name is empty")
        return name

    return KeyShape(help=f"normalised model name, e.g. {example}", parse=parse)
