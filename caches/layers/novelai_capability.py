"""NovelAI token-limit map (spec 9): static limits of known NovelAI text models.

The input limit is the model's largest context (Opus tier); a guild's actual
context depends on its subscription (see the novelai_subscription layer).
"""

from __future__ import annotations

from caches.layers._static_limits import StaticLimitLayer, TokenLimits

NAME = "novelai_capability"

NOVELAI_TOKEN_LIMITS: dict[str, TokenLimits] = {
    "llama-3-erato-v1": TokenLimits(8_192, 150),
    "kayra-v1": TokenLimits(8_192, 150),
    "clio-v1": TokenLimits(8_192, 150),
}

_layer = StaticLimitLayer(
    NAME,
    NOVELAI_TOKEN_LIMITS,
    prefixes=("novelai/",),
    example="kayra-v1",
    description="Static token limits of known NovelAI models (refilled from code).",
)

#: Return a NovelAI model's token limits, or None when it is not known.
get_novelai_token_limits = _layer.lookup

LAYER = _layer.layer
