"""A static token-limit map served through a cache, for the provider capability layers.

`static_limit_layer` builds and registers one the same way for every provider.
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
from caches.registry import EmergencyPolicy, registry

#: Distinct names remembered (known and unknown) per map.
MAX_NAMES = 512


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """A model's context window and largest output, in tokens."""

    input_tokens: int
    output_tokens: int


class StaticLimitMap:
    """A read-only name -> TokenLimits table with a bounded lookup cache."""

    def __init__(
        self, name: str, table: Mapping[str, TokenLimits], *, prefixes: tuple[str, ...]
    ) -> None:
        self.table = MappingProxyType(dict(table))
        self.prefixes = prefixes
        self.cache: BoundedTTLCache[str, TokenLimits | None] = BoundedTTLCache(
            name, maxsize=MAX_NAMES, ttl=None
        )

    def normalise(self, model: str) -> str:
        """Return the lookup form of a model name."""
        name = model.strip().lower()
        for prefix in self.prefixes:
            name = name.removeprefix(prefix)
        return name

    def parse_key(self, text: str) -> str:
        """Turn an operator-typed model name into its cache key."""
        name = self.normalise(text)
        if not name:
            raise ValueError("the model name is empty")
        return name

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


def static_limit_layer(
    name: str,
    table: Mapping[str, TokenLimits],
    *,
    prefixes: tuple[str, ...],
    description: str,
    key_example: str,
) -> StaticLimitMap:
    """Build a provider's limit map and register its cache under `name`.

    Preserved in an emergency and not invalidatable: the table is code, so no
    write can make an entry stale and a clear would only cost refills.
    """
    limits = StaticLimitMap(name, table, prefixes=prefixes)
    registry.register(
        name,
        limits.cache,
        policy=EmergencyPolicy.PRESERVE,
        invalidatable=False,
        description=description,
        parse_key=limits.parse_key,
        key_help=f"normalised model name, e.g. {key_example}",
    )
    return limits
