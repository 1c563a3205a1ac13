"""Gemini and NovelAI token-limit maps: static lookups that survive a clear."""

from __future__ import annotations

from caches.layers.gemini_capability import get_gemini_token_limits
from caches.layers.novelai_capability import get_novelai_token_limits
from caches.registry import registry


def test_known_gemini_models():
    pro = get_gemini_token_limits("gemini-2.5-pro")
    assert pro is not None and pro.input_tokens == 1_048_576
    assert get_gemini_token_limits("models/Gemini-1.5-Pro").input_tokens == 2_097_152


def test_dated_variants_use_the_longest_known_prefix():
    lite = get_gemini_token_limits("gemini-2.5-flash-lite-preview-06-17")
    assert lite == get_gemini_token_limits("gemini-2.5-flash-lite")
    assert get_gemini_token_limits("gemini-2.5-flashy") is None


def test_unknown_models_answer_none():
    assert get_gemini_token_limits("gpt-4o") is None
    assert get_novelai_token_limits("mystery") is None


def test_known_novelai_models():
    assert get_novelai_token_limits("novelai/kayra-v1").input_tokens == 8192
    assert get_novelai_token_limits("llama-3-erato-v1") is not None


def test_lookups_survive_a_clear():
    get_gemini_token_limits("gemini-2.5-pro")
    registry.clear_all()
    assert get_gemini_token_limits("gemini-2.5-pro") is not None
    assert len(registry.get("gemini_capability")) == 1


def test_static_maps_are_preserved_and_not_invalidatable():
    for name in ("gemini_capability", "novelai_capability"):
        entry = registry.entry(name)
        assert str(entry.policy) == "preserve" and not entry.invalidatable
