"""Capability, limit, pricing and video-field rules of the catalog parsers."""

from __future__ import annotations

from typing import Any

import pytest

from caches.catalogs.entries import BasicModel, Pricing, TokenLimits
from caches.catalogs.parsing import (
    parse_basic_model,
    parse_pricing,
    parse_text_model,
    parse_video_model,
)
from tests.caches.catalogs.conftest import text_model


def parse(**fields: Any) -> Any:
    entry = parse_text_model(text_model("acme/model", **fields))
    assert entry is not None
    return entry


def test_tools_come_from_supported_parameters() -> None:
    assert parse(supported_parameters=["temperature", "tools"]).supports_tools
    assert not parse(supported_parameters=["temperature"]).supports_tools
    assert not parse().supports_tools


@pytest.mark.parametrize(
    "description",
    [
        "Supports native function calling and JSON mode.",
        "A model with Tool Calling.",
        "NATIVE FUNCTION CALLING",
        "Great at tool-calling agents.",
    ],
)
def test_description_advertising_tool_calling_grants_tools(description: str) -> None:
    assert parse(description=description, supported_parameters=[]).supports_tools


@pytest.mark.parametrize(
    "description", ["Function calling via prompts.", "A tool for calling friends.", ""]
)
def test_other_descriptions_do_not_grant_tools(description: str) -> None:
    assert not parse(description=description).supports_tools


@pytest.mark.parametrize(
    "description",
    [
        "This model does not support tool calling.",
        "Doesn't support tool calling.",
        "Doesn’t support native function calling.",
        "No tool calling.",
        "A chat model without tool calling or vision.",
        "Not tuned for tool-calling.",
        "Does not support streaming, tool calling or JSON mode.",
        "Lacks native function calling.",
        "Tool calling is not supported.",
        "Tool calling isn't supported yet.",
        "Tool calling and vision are not available.",
        "Tool calling: unsupported.",
    ],
)
def test_negated_tool_calling_does_not_grant_tools(description: str) -> None:
    assert not parse(description=description, supported_parameters=[]).supports_tools


@pytest.mark.parametrize(
    "description",
    [
        "No streaming, but tool calling works.",
        "Not just chat: it does tool calling too.",
        "Not a toy. Tool calling, vision and JSON mode.",
        "Does not support vision. Supports tool calling.",
        "Tool calling is supported; vision is not supported.",
        "Tool calling, not just chat.",
        "Tool calling works without any setup.",
        "Does not support audio; native function calling is built in.",
    ],
)
def test_tool_calling_beside_an_unrelated_negation_grants_tools(
    description: str,
) -> None:
    assert parse(description=description, supported_parameters=[]).supports_tools


def test_listed_tools_win_over_a_negated_description() -> None:
    entry = parse(
        description="Does not support tool calling.", supported_parameters=["tools"]
    )
    assert entry.supports_tools


def test_tool_choice_only_when_listed() -> None:
    assert parse(supported_parameters=["tools", "tool_choice"]).supports_tool_choice
    assert not parse(supported_parameters=["tools"]).supports_tool_choice
    assert not parse(description="native function calling").supports_tool_choice


def test_vision_and_video_input_come_from_input_modalities() -> None:
    entry = parse(architecture={"input_modalities": ["text", "image", "video"]})
    assert entry.supports_vision and entry.supports_video_input
    text_only = parse(
        architecture={"input_modalities": ["text"], "output_modalities": ["image"]}
    )
    assert not text_only.supports_vision and not text_only.supports_video_input


def test_structured_output_comes_from_supported_parameters() -> None:
    assert parse(supported_parameters=["structured_outputs"]).supports_structured_output
    assert not parse(
        supported_parameters=["response_format"]
    ).supports_structured_output


def test_supported_parameters_are_kept_lowercased() -> None:
    entry = parse(supported_parameters=["Tools", " tool_choice ", 3, None, "top_p"])
    assert entry.supported_parameters == frozenset({"tools", "tool_choice", "top_p"})


def test_token_limits_prefer_the_models_context_then_top_provider() -> None:
    top = {"context_length": 64_000, "max_completion_tokens": 4096}
    assert parse(context_length=128_000, top_provider=top).token_limits == TokenLimits(
        128_000, 4096
    )
    assert parse(context_length=None, top_provider=top).token_limits == TokenLimits(
        64_000, 4096
    )
    assert parse(context_length="8192").token_limits == TokenLimits(8192, None)


@pytest.mark.parametrize("bad", [0, -5, "lots", True, 1.5, None, [1]])
def test_invalid_token_limits_are_unknown(bad: object) -> None:
    entry = parse(context_length=bad, top_provider={"max_completion_tokens": bad})
    assert entry.token_limits == TokenLimits(None, None)


def test_tokenizer_comes_from_architecture() -> None:
    assert parse(architecture={"tokenizer": "Claude"}).tokenizer == "Claude"
    assert parse(architecture={"tokenizer": ""}).tokenizer is None
    assert parse().tokenizer is None


def test_pricing_is_per_million_tokens() -> None:
    pricing = parse_pricing({"prompt": "0.0000025", "completion": "0.00001"})
    assert pricing is not None
    assert pricing.prompt_per_million == pytest.approx(2.5)
    assert pricing.completion_per_million == pytest.approx(10.0)
    assert parse_pricing({"prompt": "0", "completion": 0}) == Pricing(0.0, 0.0)
    assert (
        parse(pricing={"prompt": "0.000001", "completion": "0.000002"}).pricing
        is not None
    )


@pytest.mark.parametrize(
    "pricing",
    [
        {"prompt": "-1", "completion": "-1"},
        {"prompt": "-0.000001", "completion": "0.000002"},
        {"prompt": "abc", "completion": "0.000002"},
        {"prompt": "0.000001", "completion": "NaN"},
        {"prompt": float("nan"), "completion": "0"},
        {"prompt": "inf", "completion": "0"},
        {"prompt": "0.000001"},
        {"completion": "0.000002"},
        {"prompt": None, "completion": "0"},
        {"prompt": True, "completion": "0"},
        {},
        "0.000001",
        None,
    ],
)
def test_invalid_pricing_means_no_pricing(pricing: object) -> None:
    assert parse_pricing(pricing) is None
    assert parse(pricing=pricing).pricing is None


@pytest.mark.parametrize(
    "item", [None, "openai/gpt-4o", [], {}, {"id": ""}, {"id": "  "}, {"id": 7}]
)
def test_items_without_a_usable_id_are_skipped(item: object) -> None:
    assert parse_text_model(item) is None
    assert parse_basic_model(item) is None
    assert parse_video_model(item) is None


def test_text_model_survives_junk_fields() -> None:
    entry = parse(
        name=5, description=None, architecture="x", top_provider=[], pricing="free"
    )
    assert (entry.name, entry.description, entry.pricing) == ("", "", None)


def test_basic_model_keeps_name_and_description() -> None:
    item = {
        "id": " OpenAI/Text-Embedding-3-Small ",
        "name": "TE3",
        "description": "Embeds.",
    }
    assert parse_basic_model(item) == BasicModel(
        "OpenAI/Text-Embedding-3-Small", "TE3", "Embeds."
    )


def test_video_model_reads_openrouter_fields() -> None:
    entry = parse_video_model(
        {
            "id": "google/veo-3.1",
            "supported_resolutions": ["720p", "1080p"],
            "supported_aspect_ratios": ["16:9", "9:16"],
            "supported_sizes": None,
            "supported_durations": [4, 6, 8],
            "supported_frame_images": ["first_frame"],
            "generate_audio": True,
            "seed": None,
            "allowed_passthrough_parameters": ["output_config"],
        }
    )
    assert entry is not None
    assert (entry.resolutions, entry.aspect_ratios, entry.sizes) == (
        ("720p", "1080p"),
        ("16:9", "9:16"),
        (),
    )
    assert entry.durations == (4, 6, 8)
    assert (entry.supports_first_frame, entry.supports_last_frame) == (True, False)
    assert (entry.supports_audio, entry.supports_seed) == (True, False)
    assert entry.passthrough_parameters == ("output_config",)


def test_video_model_accepts_alternative_field_names_and_junk() -> None:
    entry = parse_video_model(
        {
            "id": "acme/vid",
            "resolutions": ["480p", 7],
            "aspect_ratios": "16:9",
            "durations": ["5s", "10", 2.5, -1, "long", True, float("inf")],
            "supports_first_frame": True,
            "supports_last_frame": "yes",
            "supports_audio": True,
            "passthrough_parameters": ["style"],
        }
    )
    assert entry is not None
    assert (entry.resolutions, entry.aspect_ratios) == (("480p",), ())
    assert entry.durations == (5, 10, 2.5)
    assert (
        entry.supports_first_frame,
        entry.supports_last_frame,
        entry.supports_audio,
    ) == (True, False, True)
    assert entry.passthrough_parameters == ("style",)
