"""Model fields that carry the input rules: Discord ids, bounded text, safe JSON.

Each field validates in `full_clean()`, so every admin form shows a field
error. Where SQL can say the rule, the model also declares a CHECK
(`snowflake_checks`, `length_checks`), so writes that skip validation
(repositories, bulk writes, the shell) cannot store the value either.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual
from django.utils.functional import cached_property

from tomori.domain.models.validation import (
    SNOWFLAKE_DIGITS,
    parse_json_text,
    parse_snowflake,
    validate_json_value,
    validate_multiline,
    validate_single_line,
    validate_snowflake,
)


class SnowflakeFormField(forms.IntegerField):
    """A Discord id typed as ASCII digits (no sign, no fullwidth digits, no '1.0')."""

    widget = forms.TextInput

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        try:
            return parse_snowflake(str(value))
        except ValueError as exc:
            raise ValidationError(str(exc), code="snowflake") from None

    def widget_attrs(self, widget: forms.Widget) -> dict[str, Any]:
        return {
            "inputmode": "numeric",
            "pattern": f"[0-9]{{1,{SNOWFLAKE_DIGITS}}}",
            "maxlength": str(SNOWFLAKE_DIGITS),
        }


class SnowflakeField(models.BigIntegerField):
    """A Discord id: from 1 to 2^63-1 (pair it with `snowflake_checks` in Meta)."""

    description = "Discord id (1 to 2^63-1)"
    default_validators = [validate_snowflake]

    def formfield(self, **kwargs: Any) -> Any:  # type: ignore[override]
        defaults = {"form_class": SnowflakeFormField, "min_value": 1}
        return super().formfield(**{**defaults, **kwargs})


def snowflake_checks(prefix: str, *fields: str) -> list[models.BaseConstraint]:
    """Return a CHECK (>= 1) per Discord id field; NULL passes, as SQL has it."""
    return [
        models.CheckConstraint(
            condition=Q(**{f"{name}__gte": 1}), name=f"{prefix}_{name}_positive"
        )
        for name in fields
    ]


def length_checks(prefix: str, **limits: int) -> list[models.BaseConstraint]:
    """Return a CHECK (LENGTH <= limit) per text field (TextField has no length)."""
    return [
        models.CheckConstraint(
            condition=LessThanOrEqual(Length(name), limit),
            name=f"{prefix}_{name}_max_{limit}",
        )
        for name, limit in limits.items()
    ]


class SingleLineField(models.CharField):
    """A one-line text (a name): no control characters, `max_length` as usual."""

    default_validators = [validate_single_line]


class BoundedTextField(models.TextField):
    """A multi-line text whose `max_length` is validated (Django's TextField only shows it).

    Control characters are rejected except newline, carriage return and tab.
    Pair it with `length_checks` in the model's Meta.
    """

    default_validators = [validate_multiline]

    def __init__(self, *args: Any, max_length: int, **kwargs: Any) -> None:
        kwargs["max_length"] = max_length
        super().__init__(*args, **kwargs)

    @cached_property
    def validators(self) -> list[Any]:
        return [*super().validators, MaxLengthValidator(self.max_length)]


class SafeJSONFormField(forms.JSONField):
    """A JSON form field whose parse can only fail with a form error.

    Django's JSONField lets RecursionError (deep nesting) and ValueError (an
    integer of thousands of digits) escape json.loads, and accepts NaN and
    NUL; here every such input is a ValidationError.
    """

    def to_python(self, value: Any) -> Any:
        if self.disabled or value in self.empty_values:
            return super().to_python(value)
        if isinstance(value, list | dict | int | float | forms.fields.JSONString):
            return value
        converted = parse_json_text(value)
        if isinstance(converted, str):
            return forms.fields.JSONString(converted)
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return parse_json_text(data)
        except ValidationError:
            return forms.fields.InvalidJSONInput(data)


class SafeJSONField(models.JSONField):
    """A JSONField that rejects NUL, NaN/Infinity, huge integers and deep nesting."""

    default_validators = [validate_json_value]

    def formfield(self, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().formfield(**{"form_class": SafeJSONFormField, **kwargs})
