"""NovelAI token-limit map (spec 9): static limits of known NovelAI text models.

The input limit is the model's largest context (Opus tier); a guild's actual
context depends on its subscription (see the novelai_subscription layer).
"""

from __future__ import annotations

from caches.layers._feeds import NotFed
from caches.layers._static_limits import StaticLimitMap, TokenLimits, static_limit_key
from caches.layers.declaration import Layer, LayerSettings, unbuilt
from caches.registry import EmergencyPolicy, ManagedCache

NAME = "novelai_capability"

NOVELAI_TOKEN_LIMITS: dict[str, TokenLimits] = {
    "llama-3-erato-v1": TokenLimits(8_192, 150),
    "kayra-v1": TokenLimits(8_192, 150),
    "clio-v1": TokenLimits(8_192, 150),
}

PREFIXES = ("novelai/",)

_map: StaticLimitMap = unbuilt(NAME)  # set by _build


def _build(_config: LayerSettings) -> ManagedCache:
    """Build the lookup map in front of the table."""
    global _map
    _map = StaticLimitMap(
        NAME,
        NOVELAI_TOKEN_LIMITS,
        prefixes=PREFIXES,
    )
    return _map.cache


def get_novelai_token_limits(model: str) -> TokenLimits | None:
    """Return a NovelAI model's token limits, or None when it is not known."""
    return _map.lookup(model)


LAYER = Layer(
    name=NAME,
    description="Static token limits of known NovelAI models (refilled from code).",
    policy=EmergencyPolicy.PRESERVE,
    invalidatable=False,
    key=static_limit_key(PREFIXES, example="kayra-v1"),
    not_fed=NotFed.STATIC,
    build=_build,
)
