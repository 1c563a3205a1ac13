"""Gemini token-limit map (spec 8): static limits of known Gemini models."""

from __future__ import annotations

from caches.layers._static_limits import StaticLimitLayer, TokenLimits

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

_layer = StaticLimitLayer(
    NAME,
    GEMINI_TOKEN_LIMITS,
    prefixes=("models/", "google/"),
    example="gemini-2.5-flash",
    description="Static token limits of known Gemini models (refilled from code).",
)

#: Return a Gemini model's token limits, or None when it is not known.
get_gemini_token_limits = _layer.lookup

LAYER = _layer.layer
