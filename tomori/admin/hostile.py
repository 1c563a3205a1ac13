"""Admin defences against hostile input that Django lets through to a 500.

Closed in one place each, for every registered ModelAdmin (Django's own too):
- A NUL byte in a query-string value (list filter, search box, autocomplete
  term, date drill-down) reaches PostgreSQL, which rejects NUL in text with a
  DataError. `HostileInputMiddleware` answers 400 instead.
- The changelist's action form filters by the submitted ids (`abc` raises
  ValueError) and the date drill-down builds a date from the year typed
  (a 400-digit year raises OverflowError): the middleware answers 400 to both.
- An autocomplete widget re-rendering an invalid form filters its queryset by
  the submitted value (`abc` raises ValueError), and a many-to-many field
  filters by a 400-digit id, which SQLite cannot bind (OverflowError).
  `HostileInputAdminMixin` gives every ModelAdmin widgets that drop values
  the target field cannot hold and a many-to-many field that reports them as
  a form error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib.admin import ModelAdmin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.widgets import AutocompleteSelect, AutocompleteSelectMultiple
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

NUL = "\x00"
_DRILLDOWN_PART = re.compile(r"[0-9]{1,4}")


def has_nul(request: HttpRequest) -> bool:
    """Return whether the path or any query-string key or value holds a NUL byte."""
    if NUL in request.path:
        return True
    return any(
        NUL in key or any(NUL in value for value in values)
        for key, values in request.GET.lists()
    )


def bad_selection(request: HttpRequest, model_admin: ModelAdmin) -> str | None:
    """Return why the action form's selected ids are not ids of the model, or None."""
    if request.method != "POST" or ACTION_CHECKBOX_NAME not in request.POST:
        return None
    pk = model_admin.model._meta.pk
    assert pk is not None
    for raw in request.POST.getlist(ACTION_CHECKBOX_NAME):
        try:
            pk.clean(raw, None)
        except ValidationError:
            return f"The selected {pk.name} {raw[:40]!r} is not valid."
    return None


def bad_drilldown(request: HttpRequest, model_admin: ModelAdmin) -> str | None:
    """Return why the date drill-down (year/month/day) is not a date part, or None."""
    field = getattr(model_admin, "date_hierarchy", None)
    if not field:
        return None
    for part in ("year", "month", "day"):
        value = request.GET.get(f"{field}__{part}")
        if value is not None and not _DRILLDOWN_PART.fullmatch(value):
            return f"The {part} of the date drill-down must be 1 to 4 digits."
    return None


class HostileInputMiddleware:
    """Answer 400 to admin input that Django would turn into a 500 (see the module).

    Form bodies are otherwise left to the forms: Django's CharField already
    rejects NUL with a field error, and a 400 would lose what the user typed.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if has_nul(request):
            return _bad_request("A NUL character (%00) is not accepted in a URL.")
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: Any
    ) -> HttpResponse | None:
        # ModelAdmin.get_urls() marks each of its views with `model_admin`.
        model_admin = getattr(view, "model_admin", None)
        if model_admin is None:
            return None
        problem = bad_selection(request, model_admin) or bad_drilldown(
            request, model_admin
        )
        return _bad_request(problem) if problem else None


def _bad_request(message: str) -> HttpResponse:
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


def holdable(target: Any, raw: Any) -> bool:
    """Return whether model field `target` can hold the submitted value `raw`."""
    try:
        target.clean(raw, None)
    except ValidationError:
        return False
    return True


class _HoldableValuesMixin:
    """Render only the selected values the target field can hold."""

    field: Any

    def optgroups(self, name: str, value: list[Any], attr: Any = None) -> Any:
        remote = self.field.remote_field
        opts = remote.model._meta
        target = opts.get_field(getattr(remote, "field_name", None) or opts.pk.name)
        kept = [v for v in value if holdable(target, v)]
        return super().optgroups(name, kept, attr)  # type: ignore[misc]


class SafeAutocompleteSelect(_HoldableValuesMixin, AutocompleteSelect):  # type: ignore[misc]
    """AutocompleteSelect that re-renders a bad submitted id instead of raising."""


class SafeAutocompleteSelectMultiple(  # type: ignore[misc]
    _HoldableValuesMixin, AutocompleteSelectMultiple
):
    """AutocompleteSelectMultiple that re-renders bad submitted ids instead of raising."""


class SafeModelMultipleChoiceField(forms.ModelMultipleChoiceField):
    """A many-to-many field whose ids must fit the key before any query is built."""

    def _check_values(self, value: Any) -> Any:
        if isinstance(value, list | tuple) and self.queryset is not None:
            opts = self.queryset.model._meta
            target = (
                opts.get_field(self.to_field_name) if self.to_field_name else opts.pk
            )
            for raw in value:
                if not holdable(target, raw):
                    raise ValidationError(
                        self.error_messages["invalid_pk_value"],
                        code="invalid_pk_value",
                        params={"pk": str(raw)[:40]},
                    )
        return super()._check_values(value)  # type: ignore[misc]


class HostileInputAdminMixin(ModelAdmin):
    """Relation form fields and widgets that answer bad ids with a form error.

    Put it first among the bases: `class UserAdmin(HostileInputAdminMixin, ...)`.
    """

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name in self.get_autocomplete_fields(request):
            widget = SafeAutocompleteSelect(
                db_field, self.admin_site, using=kwargs.get("using")
            )
            kwargs.setdefault("widget", widget)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name in self.get_autocomplete_fields(request):
            widget = SafeAutocompleteSelectMultiple(
                db_field, self.admin_site, using=kwargs.get("using")
            )
            kwargs.setdefault("widget", widget)
        kwargs.setdefault("form_class", SafeModelMultipleChoiceField)
        return super().formfield_for_manytomany(db_field, request, **kwargs)
