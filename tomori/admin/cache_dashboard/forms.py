"""Dashboard forms: each validates its input into an operator command (or a form error)."""

from __future__ import annotations

from typing import Any

from django import forms

from caches.messages import AnyCommand
from caches.operations import (
    OperationError,
    clear_cache_command,
    emergency_clear_command,
    invalidate_key_command,
    refresh_catalogs_command,
)
from tomori.domain.models.validation import validate_operator_key


class CommandForm(forms.Form):
    """A form whose `clean()` builds `self.command` for the operator `issued_by`."""

    def __init__(self, *args: Any, issued_by: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.issued_by = issued_by
        self.command: AnyCommand | None = None


class ClearCacheForm(CommandForm):
    """Clear one cache by name."""

    cache = forms.CharField(max_length=100)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "cache" in data:
            try:
                self.command = clear_cache_command(
                    data["cache"], issued_by=self.issued_by
                )
            except OperationError as exc:
                self.add_error("cache", str(exc))
        return data


class InvalidateKeyForm(CommandForm):
    """Drop one key of one cache; the key must have the layer's shape (`parse_key`)."""

    cache = forms.ChoiceField(choices=())
    key = forms.CharField(
        max_length=500,
        validators=[validate_operator_key],
        help_text="As the layer's key help says; ids are ASCII digits, 1 to 2^63-1.",
    )

    def __init__(
        self, *args: Any, cache_choices: list[tuple[str, str]], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        cache_field = self.fields["cache"]
        assert isinstance(cache_field, forms.ChoiceField)
        cache_field.choices = cache_choices

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "cache" in data and "key" in data:
            try:
                self.command = invalidate_key_command(
                    data["cache"], data["key"], issued_by=self.issued_by
                )
            except OperationError as exc:
                self.add_error("key", str(exc))
        return data


class EmergencyClearForm(CommandForm):
    """Run the emergency clear, optionally including short-term memory."""

    include_short_term_memory = forms.BooleanField(
        required=False,
        label="Also clear non-expired short-term memory (conversational state: last resort)",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        self.command = emergency_clear_command(
            include_short_term_memory=bool(data.get("include_short_term_memory"))
            or None,
            issued_by=self.issued_by,
        )
        return data


class RefreshCatalogsForm(CommandForm):
    """Refresh the OpenRouter catalogs; `fresh` ignores the refresh rate limit."""

    fresh = forms.BooleanField(required=False, label="ignore the rate limit")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        self.command = refresh_catalogs_command(
            fresh=bool(data.get("fresh")), issued_by=self.issued_by
        )
        return data
