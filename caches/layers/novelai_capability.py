"""NovelAI token-limit map (spec 9): static limits of known NovelAI text models.

The input limit is the model's largest context (Opus tier); a guild's actual
context depends on its subscription (see the novelai_subscription layer).
"""

from __future__ import annotations

from caches.layers._static_limits import TokenLimits, static_limit_layer

NAME = "novelai_capability"

NOVELAI_TOKEN_LIMITS: dict[str, TokenLimits] = {
    "llama-3-erato-v1": TokenLimits(8_192, 150),
    "kayra-v1": TokenLimits(8_192, 150),
    "clio-v1": TokenLimits(8_192, 150),
}

_map = static_limit_layer(
    NAME,
    NOVELAI_TOKEN_LIMITS,
    prefixes=("novelai/",),
    description="Static token limits of known NovelAI models (refilled from code).",
    key_example="kayra-v1",
)


def get_novelai_token_limits(model: str) -> TokenLimits | None:
    """Return a NovelAI model's token limits, or None when it is not known."""
    return _map.lookup(model)
