"""Dashboard forms: each validates its input into an operator command (or a form error).

Every form takes an optional `worker`: a worker id from a worker's page, which
sends the command to that worker alone (it must be live), else to every one.
"""

from __future__ import annotations

from typing import Any

from django import forms

from caches.messages import AnyCommand, FleetCommand
from caches.operations import (
    OperationError,
    clear_all_command,
    clear_cache_command,
    emergency_clear_command,
    invalidate_key_command,
    on_worker_command,
    refresh_catalogs_command,
)
from tomori.domain.models.validation import validate_operator_key

#: The longest worker id the bus carries (caches.messages.MAX_NAME).
MAX_WORKER_ID = 200


class CommandForm(forms.Form):
    """A form whose `clean()` builds `self.command` for the operator `issued_by`."""

    worker = forms.CharField(
        max_length=MAX_WORKER_ID,
        required=False,
        widget=forms.HiddenInput,
        help_text="A live worker's id: run the command on that worker alone.",
    )

    def __init__(self, *args: Any, issued_by: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.issued_by = issued_by
        self.command: AnyCommand | None = None

    @property
    def target(self) -> str:
        """Return the worker id the form names ("" for every worker), as typed."""
        value = self.data.get("worker") if self.is_bound else ""
        return value if isinstance(value, str) else ""

    def _send(self, command: FleetCommand) -> None:
        """Set `self.command`: `command`, or it for the named worker alone."""
        worker = self.cleaned_data.get("worker") or ""
        if not worker:
            self.command = command
            return
        try:
            self.command = on_worker_command(command, worker)
        except OperationError as exc:
            self.add_error("worker", str(exc))


class ClearAllForm(CommandForm):
    """Clear every clearable cache."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "worker" in data:
            self._send(clear_all_command(issued_by=self.issued_by))
        return data


class ClearCacheForm(CommandForm):
    """Clear one cache by name."""

    cache = forms.CharField(max_length=100)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "cache" in data and "worker" in data:
            try:
                command = clear_cache_command(data["cache"], issued_by=self.issued_by)
            except OperationError as exc:
                self.add_error("cache", str(exc))
            else:
                self._send(command)
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
        if "cache" in data and "key" in data and "worker" in data:
            try:
                command = invalidate_key_command(
                    data["cache"], data["key"], issued_by=self.issued_by
                )
            except OperationError as exc:
                self.add_error("key", str(exc))
            else:
                self._send(command)
        return data


class EmergencyClearForm(CommandForm):
    """Run the emergency clear, optionally including short-term memory."""

    include_short_term_memory = forms.BooleanField(
        required=False,
        label="Also clear non-expired short-term memory (conversational state: last resort)",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "worker" in data:
            self._send(
                emergency_clear_command(
                    include_short_term_memory=bool(
                        data.get("include_short_term_memory")
                    )
                    or None,
                    issued_by=self.issued_by,
                )
            )
        return data


class RefreshCatalogsForm(CommandForm):
    """Refresh the OpenRouter catalogs; `fresh` ignores the refresh rate limit."""

    fresh = forms.BooleanField(required=False, label="ignore the rate limit")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "worker" in data:
            self._send(
                refresh_catalogs_command(
                    fresh=bool(data.get("fresh")), issued_by=self.issued_by
                )
            )
        return data
