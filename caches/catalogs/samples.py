"""Small, realistic OpenRouter catalog payloads for the fake server, demo and simulator."""

from __future__ import annotations

from typing import Any


def sample_catalogs() -> dict[str, list[dict[str, Any]]]:
    """Return small, realistic payloads for the four catalogs (demo and simulator)."""
    return {
        "text": _sample_text_models(),
        "embedding": [
            {
                "id": "openai/text-embedding-3-small",
                "name": "Text Embedding 3 Small",
                "description": "OpenAI text embedding model.",
            }
        ],
        "image": [
            {
                "id": "google/gemini-2.5-flash-image",
                "name": "Google: Nano Banana",
                "description": "Image generation and editing.",
            }
        ],
        "video": [
            {
                "id": "google/veo-3.1",
                "name": "Google: Veo 3.1",
                "description": "Video generation.",
                "supported_resolutions": ["720p", "1080p"],
                "supported_aspect_ratios": ["16:9", "9:16"],
                "supported_sizes": None,
                "supported_durations": [4, 6, 8],
                "supported_frame_images": ["first_frame", "last_frame"],
                "generate_audio": True,
                "seed": True,
                "allowed_passthrough_parameters": [],
            }
        ],
    }


def _sample_text_models() -> list[dict[str, Any]]:
    return [
        text_model_payload(
            "openai/gpt-4o-mini",
            name="OpenAI: GPT-4o-mini",
            context=128_000,
            max_completion=16_384,
            tokenizer="GPT",
            inputs=["text", "image"],
            params=["tools", "tool_choice", "structured_outputs", "response_format"],
            prices=("0.00000015", "0.0000006"),
        ),
        text_model_payload(
            "anthropic/claude-3.5-haiku",
            name="Anthropic: Claude 3.5 Haiku",
            context=200_000,
            max_completion=8_192,
            tokenizer="Claude",
            inputs=["text", "image"],
            params=["tools", "tool_choice", "temperature"],
            prices=("0.0000008", "0.000004"),
        ),
        text_model_payload(
            "google/gemini-2.0-flash-001",
            name="Google: Gemini 2.0 Flash",
            context=1_048_576,
            max_completion=8_192,
            tokenizer="Gemini",
            inputs=["text", "image", "video"],
            params=["tools", "tool_choice", "structured_outputs"],
            prices=("0.0000001", "0.0000004"),
        ),
        text_model_payload(
            "mistralai/mistral-7b-instruct:free",
            name="Mistral: Mistral 7B Instruct (free)",
            description="A 7B model with native function calling.",
            context=32_768,
            max_completion=16_384,
            tokenizer="Mistral",
            params=["temperature"],
            prices=("0", "0"),
        ),
    ]


def text_model_payload(
    model_id: str,
    *,
    name: str = "",
    description: str = "",
    context: int = 8_192,
    max_completion: int | None = None,
    tokenizer: str = "Other",
    inputs: list[str] | None = None,
    params: list[str] | None = None,
    prices: tuple[str, str] = ("0", "0"),
) -> dict[str, Any]:
    """Return one `/models` item in OpenRouter's shape (prices are USD per token)."""
    return {
        "id": model_id,
        "name": name or model_id,
        "description": description,
        "context_length": context,
        "architecture": {
            "input_modalities": inputs or ["text"],
            "output_modalities": ["text"],
            "tokenizer": tokenizer,
        },
        "pricing": {"prompt": prices[0], "completion": prices[1]},
        "top_provider": {
            "context_length": context,
            "max_completion_tokens": max_completion,
        },
        "supported_parameters": params or [],
    }
