"""Immutable catalog entries: one frozen dataclass per OpenRouter catalog kind."""

from __future__ import annotations

from dataclasses import dataclass


def normalize_codename(codename: object) -> str:
    """Return the catalog key for a codename: trimmed and lowercased ("" if not a str)."""
    if not isinstance(codename, str):
        return ""
    return codename.strip().lower()


@dataclass(frozen=True, slots=True)
class Pricing:
    """USD per million tokens; present only when both prices are valid."""

    prompt_per_million: float
    completion_per_million: float


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """Context window and completion cap; either may be unknown."""

    context_length: int | None
    max_completion_tokens: int | None


@dataclass(frozen=True, slots=True)
class TextModel:
    """One entry of the text catalog (`/models`)."""

    id: str
    name: str
    description: str
    supported_parameters: frozenset[str]
    input_modalities: frozenset[str]
    output_modalities: frozenset[str]
    supports_tools: bool
    supports_tool_choice: bool
    supports_vision: bool
    supports_video_input: bool
    supports_structured_output: bool
    token_limits: TokenLimits
    tokenizer: str | None
    pricing: Pricing | None


@dataclass(frozen=True, slots=True)
class BasicModel:
    """One entry of the embedding or image catalog: existence, name, description."""

    id: str
    name: str
    description: str


@dataclass(frozen=True, slots=True)
class VideoModel:
    """One entry of the video catalog (`/videos/models`)."""

    id: str
    name: str
    description: str
    resolutions: tuple[str, ...]
    aspect_ratios: tuple[str, ...]
    sizes: tuple[str, ...]
    durations: tuple[float, ...]
    supports_first_frame: bool
    supports_last_frame: bool
    supports_audio: bool
    supports_seed: bool
    passthrough_parameters: tuple[str, ...]
