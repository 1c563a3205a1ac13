"""The text catalog (`/models`) and the synchronous readers a chat turn consults.

Every reader answers from the serving catalog only and never refreshes: the
background TTL refresh keeps them current. A reader returns None when the model
is not in the catalog, so a caller can tell "unknown here" (fall back to its
own flags) from "known not to support it" (False).
"""

from __future__ import annotations

from typing import Any

from caches.catalogs.entries import Pricing, TextModel, TokenLimits
from caches.catalogs.parsing import parse_text_model
from caches.catalogs.refresher import CatalogRefresher


class TextCatalog(CatalogRefresher[TextModel]):
    """The text catalog: capabilities, token limits, tokenizer and pricing per model."""

    def __init__(self, name: str = "text", **kwargs: Any) -> None:
        super().__init__(name, parse_entry=parse_text_model, **kwargs)

    def get_pricing(self, codename: str) -> Pricing | None:
        """Return USD per million prompt/completion tokens, or None if unknown or invalid."""
        entry = self.get(codename)
        return entry.pricing if entry else None

    def get_token_limits(self, codename: str) -> TokenLimits | None:
        """Return the model's context length and max completion tokens, or None."""
        entry = self.get(codename)
        return entry.token_limits if entry else None

    def get_tokenizer(self, codename: str) -> str | None:
        """Return the model's tokenizer family (e.g. "GPT", "Claude"), or None."""
        entry = self.get(codename)
        return entry.tokenizer if entry else None

    def get_supported_parameters(self, codename: str) -> frozenset[str] | None:
        """Return the lowercased request parameters the model accepts, or None."""
        entry = self.get(codename)
        return entry.supported_parameters if entry else None

    def supports_tools(self, codename: str) -> bool | None:
        """Return whether the model calls tools (parameter or description), None if unknown."""
        entry = self.get(codename)
        return entry.supports_tools if entry else None

    def supports_tool_choice(self, codename: str) -> bool | None:
        """Return whether `tool_choice` may be sent (listed in its parameters), None if unknown."""
        entry = self.get(codename)
        return entry.supports_tool_choice if entry else None

    def supports_vision(self, codename: str) -> bool | None:
        """Return whether the model takes image input, None if unknown."""
        entry = self.get(codename)
        return entry.supports_vision if entry else None

    def supports_video_input(self, codename: str) -> bool | None:
        """Return whether the model takes video input, None if unknown."""
        entry = self.get(codename)
        return entry.supports_video_input if entry else None

    def supports_structured_output(self, codename: str) -> bool | None:
        """Return whether the model lists `structured_outputs`, None if unknown."""
        entry = self.get(codename)
        return entry.supports_structured_output if entry else None
