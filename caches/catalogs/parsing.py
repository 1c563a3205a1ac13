"""Parse OpenRouter catalog payload items into entries, tolerating odd or missing fields.

Every parser takes one item of the payload's `data` array and returns an entry,
or None when the item is unusable (not an object, or no non-empty string `id`).
Fields that are missing or of the wrong type fall back to "unknown" (None, empty,
False) instead of rejecting the model: a model that exists but is poorly
described must still be found.

Assumptions about the payload shapes:
- text (`/models`): OpenRouter's documented model object: `id`, `name`,
  `description`, `context_length`, `architecture.{input_modalities,
  output_modalities, tokenizer}`, `pricing.{prompt, completion}` (strings, USD
  per token), `top_provider.{context_length, max_completion_tokens}`,
  `supported_parameters`.
- embedding and image: only `id`, `name`, `description` are used.
- video: OpenRouter's documented fields `supported_resolutions`,
  `supported_aspect_ratios`, `supported_sizes`, `supported_durations`,
  `supported_frame_images` (["first_frame", "last_frame"]), `generate_audio`,
  `seed`, `allowed_passthrough_parameters`; also accepted: `resolutions`,
  `aspect_ratios`, `sizes`, `durations`, `supports_first_frame`,
  `supports_last_frame`, `supports_audio`, `supports_seed`,
  `passthrough_parameters`. Durations may be numbers or numeric strings ("8",
  "8s").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from caches.catalogs.entries import (
    BasicModel,
    Pricing,
    TextModel,
    TokenLimits,
    VideoModel,
)

# The fallback for models whose metadata omits `tools` but whose description
# says they can call tools (spec section 7).
TOOL_CALLING_IN_DESCRIPTION = re.compile(
    r"native[\s-]+function[\s-]+calling|tool[\s-]+calling", re.IGNORECASE
)
# A mention only counts when not negated ("does not support tool calling",
# "no native function calling", "tool calling is not supported"). Negations
# are looked for within a few words of the phrase, in the same clause.
NEGATION_WINDOW_WORDS = 4
_NEGATION_BEFORE = re.compile(
    r"\b(?:no|not|without|never|cannot|lacks?|lacking)\b|n['’]t\b", re.IGNORECASE
)
_NEGATION_AFTER = re.compile(
    r"^\W*(?:\w+\W+){0,3}?(?:(?:not|\w*n['’]t)\W+(?:yet\W+)?(?:supported|available)"
    r"|unsupported|unavailable)\b",
    re.IGNORECASE,
)
# "but", sentence ends, colons and dashes end the clause a negation before the
# mention may sit in ("No streaming, but tool calling works" is positive);
# after it, only sentence ends and "but" do ("Tool calling: unsupported").
_CLAUSE_BREAK = re.compile(
    r"[.;:!?()—–]|\s-\s|\b(?:but|however|although|though|yet)\b", re.IGNORECASE
)
_SENTENCE_BREAK = re.compile(
    r"[.;!?()]|\b(?:but|however|although|though)\b", re.IGNORECASE
)
TOKENS_PER_MILLION = 1_000_000
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*s?\s*$", re.IGNORECASE)


def model_id(item: object) -> str | None:
    """Return the item's `id` as published, or None if the item is unusable."""
    if not isinstance(item, Mapping):
        return None
    raw = item.get("id")
    if not isinstance(raw, str) or not raw.strip():
        return None
    return raw.strip()


def parse_basic_model(item: object) -> BasicModel | None:
    """Parse an embedding or image catalog item."""
    ident = model_id(item)
    if ident is None:
        return None
    assert isinstance(item, Mapping)
    return BasicModel(
        id=ident, name=_text(item, "name"), description=_text(item, "description")
    )


def parse_text_model(item: object) -> TextModel | None:
    """Parse a text catalog item with its capabilities, limits and pricing."""
    ident = model_id(item)
    if ident is None:
        return None
    assert isinstance(item, Mapping)
    architecture = _mapping(item.get("architecture"))
    params = _string_set(item.get("supported_parameters"))
    inputs = _string_set(architecture.get("input_modalities"))
    description = _text(item, "description")
    return TextModel(
        id=ident,
        name=_text(item, "name"),
        description=description,
        supported_parameters=params,
        input_modalities=inputs,
        output_modalities=_string_set(architecture.get("output_modalities")),
        supports_tools=supports_tools(params, description),
        supports_tool_choice="tool_choice" in params,
        supports_vision="image" in inputs,
        supports_video_input="video" in inputs,
        supports_structured_output="structured_outputs" in params,
        token_limits=parse_token_limits(item),
        tokenizer=_optional_text(architecture.get("tokenizer")),
        pricing=parse_pricing(item.get("pricing")),
    )


def supports_tools(params: frozenset[str], description: str) -> bool:
    """Return whether a model can call tools: `tools` listed, else the description says so."""
    if "tools" in params:
        return True
    return any(
        not _negated(description[: match.start()], description[match.end() :])
        for match in TOOL_CALLING_IN_DESCRIPTION.finditer(description)
    )


def _negated(before: str, after: str) -> bool:
    """Tell whether the clause around a tool-calling mention negates it."""
    lead = _CLAUSE_BREAK.split(before)[-1].split()[-NEGATION_WINDOW_WORDS:]
    if _NEGATION_BEFORE.search(" ".join(lead)):
        return True
    tail = _SENTENCE_BREAK.split(after)[0]
    return _NEGATION_AFTER.search(tail) is not None


def parse_token_limits(item: Mapping[str, Any]) -> TokenLimits:
    """Return the context length (model's, else top provider's) and completion cap."""
    top = _mapping(item.get("top_provider"))
    context = _positive_int(item.get("context_length"))
    if context is None:
        context = _positive_int(top.get("context_length"))
    return TokenLimits(
        context_length=context,
        max_completion_tokens=_positive_int(top.get("max_completion_tokens")),
    )


def parse_pricing(raw: object) -> Pricing | None:
    """Return prices per million tokens, or None unless both parse as finite and >= 0."""
    pricing = _mapping(raw)
    prompt = _price(pricing.get("prompt"))
    completion = _price(pricing.get("completion"))
    if prompt is None or completion is None:
        return None
    return Pricing(
        prompt_per_million=prompt * TOKENS_PER_MILLION,
        completion_per_million=completion * TOKENS_PER_MILLION,
    )


def parse_video_model(item: object) -> VideoModel | None:
    """Parse a video catalog item, accepting OpenRouter's and alternative field names."""
    ident = model_id(item)
    if ident is None:
        return None
    assert isinstance(item, Mapping)
    frames = _string_set(item.get("supported_frame_images"))
    return VideoModel(
        id=ident,
        name=_text(item, "name"),
        description=_text(item, "description"),
        resolutions=_strings(_first(item, "supported_resolutions", "resolutions")),
        aspect_ratios=_strings(
            _first(item, "supported_aspect_ratios", "aspect_ratios")
        ),
        sizes=_strings(_first(item, "supported_sizes", "sizes")),
        durations=_durations(_first(item, "supported_durations", "durations")),
        supports_first_frame=_flag(item, "supports_first_frame")
        or "first_frame" in frames,
        supports_last_frame=_flag(item, "supports_last_frame")
        or "last_frame" in frames,
        supports_audio=_flag(item, "supports_audio", "generate_audio"),
        supports_seed=_flag(item, "supports_seed", "seed"),
        passthrough_parameters=_strings(
            _first(item, "allowed_passthrough_parameters", "passthrough_parameters")
        ),
    )


def _price(raw: object) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def _positive_int(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    if isinstance(raw, int) and raw > 0:
        return raw
    return None


def _durations(raw: object) -> tuple[float, ...]:
    values: list[float] = []
    for value in raw if isinstance(raw, list) else ():
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and (match := _DURATION.match(value)):
            number = float(match.group(1))
        if number is not None and math.isfinite(number) and number > 0:
            values.append(int(number) if number.is_integer() else number)
    return tuple(values)


def _first(item: Mapping[str, Any], *names: str) -> object:
    for name in names:
        if item.get(name) is not None:
            return item[name]
    return None


def _flag(item: Mapping[str, Any], *names: str) -> bool:
    return any(item.get(name) is True for name in names)


def _mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _text(item: Mapping[str, Any], name: str) -> str:
    value = item.get(name)
    return value if isinstance(value, str) else ""


def _optional_text(raw: object) -> str | None:
    return raw if isinstance(raw, str) and raw else None


def _strings(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(value for value in raw if isinstance(value, str) and value)


def _string_set(raw: object) -> frozenset[str]:
    return frozenset(value.strip().lower() for value in _strings(raw))
