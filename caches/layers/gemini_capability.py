"""Gemini token-limit map (spec 8): static limits of known Gemini models."""

from __future__ import annotations

from caches.layers._feeds import NotFed
from caches.layers._static_limits import StaticLimitMap, TokenLimits, static_limit_key
from caches.layers.declaration import Layer, LayerSettings, unbuilt
from caches.registry import EmergencyPolicy, ManagedCache

NAME = "gemini_capability"

_M = 1_048_576
GEMINI_TOKEN_LIMITS: dict[str, TokenLimits] = {
    "gemini-3-pro-preview": TokenLimits(_M, 65_536),
    "gemini-2.5-pro": TokenLimits(_M, 65_536),
    "gemini-2.5-flash": TokenLimits(_M, 65_536),
    "gemini-2.5-flash-lite": TokenLimits(_M, 65_536),
    "gemini-2.5-flash-image": TokenLimits(32_768, 32_768),
    "gemini-2.0-flash": TokenLimits(_M, 8_192),
    "gemini-2.0-flash-lite": TokenLimits(_M, 8_192),
    "gemini-1.5-pro": TokenLimits(2 * _M, 8_192),
    "gemini-1.5-flash": TokenLimits(_M, 8_192),
    "gemini-1.5-flash-8b": TokenLimits(_M, 8_192),
}

PREFIXES = ("models/", "google/")

_map: StaticLimitMap = unbuilt(NAME)  # set by _build


def _build(_config: LayerSettings) -> ManagedCache:
    """Build the lookup map in front of the table."""
    global _map
    _map = StaticLimitMap(
        NAME,
        GEMINI_TOKEN_LIMITS,
        prefixes=PREFIXES,
    )
    return _map.cache


def get_gemini_token_limits(model: str) -> TokenLimits | None:
    """Return a Gemini model's token limits, or None when it is not known."""
    return _map.lookup(model)


LAYER = Layer(
    name=NAME,
    description="Static token limits of known Gemini models (refilled from code).",
    policy=EmergencyPolicy.PRESERVE,
    invalidatable=False,
    key=static_limit_key(PREFIXES, example="gemini-2.5-flash"),
    not_fed=NotFed.STATIC,
    build=_build,
)
