"""Input rules every stored value obeys: Discord ids, text, JSON (issue 14).

The rules are plain functions so the model fields (`tomori.domain.models.fields`), the
admin forms and the operator key parsers (`caches.layers._support`) share them.
`parse_*` functions raise ValueError (for code that parses typed text);
`validate_*` functions raise ValidationError (Django's field validators).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

SNOWFLAKE_MAX = 2**63 - 1  # a Discord id is a positive signed 64-bit integer
SNOWFLAKE_DIGITS = len(str(SNOWFLAKE_MAX))  # 19

# Text limits (characters). Discord's own limits where the value is a Discord
# name; prompts are sent to the LLM with every turn, so a few thousand.
NAME_MAX = 100  # guild, role, user, emoji and MCP server names
PERSONA_NAME_MAX = 80  # a persona speaks as a webhook: usernames are 1-80
REASON_MAX = 200
PROMPT_MAX = 8000  # persona system prompt, channel prompt, ST preset node
DESCRIPTION_MAX = 4000  # Discord's embed description is 4096
API_KEY_MAX = 512
TOKEN_CIPHERTEXT_MAX = 1024  # a Fernet token of a ~70-character webhook token
# The ceiling of SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH (tomori/domain/knobs/).
SUMMARY_MAX = 100_000

# JSON limits: PostgreSQL's jsonb rejects NUL and NaN; Python recurses on depth.
JSON_MAX_DEPTH = 32
JSON_MAX_CHARS = 65_536  # of the text typed into a form
JSON_INT_MAX = SNOWFLAKE_MAX
_JSON_NUMBER_MAX_CHARS = 40  # a longer literal is no sane number

_ASCII_DIGITS = re.compile(r"[0-9]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc
_CONTROL_EXCEPT_NEWLINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_API_KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces


def parse_snowflake(text: str) -> int:
    """Parse a typed id: 1 to 19 ASCII digits, from 1 to 2^63-1, or raise ValueError."""
    digits = text.strip()
    if digits[:1] == "-" and _ASCII_DIGITS.fullmatch(digits[1:]):
        raise ValueError(f"{_clip(text)!r} is negative: an id is from 1 to 2^63-1")
    if not _ASCII_DIGITS.fullmatch(digits):
        raise ValueError(
            f"{_clip(text)!r} is not an integer id (ASCII digits 0-9 only)"
        )
    if len(digits) > SNOWFLAKE_DIGITS or int(digits) > SNOWFLAKE_MAX:
        raise ValueError(f"{_clip(text)!r} is too large for an id (max 2^63-1)")
    value = int(digits)
    if value < 1:
        raise ValueError(f"{_clip(text)!r} is not a positive id (ids start at 1)")
    return value


def validate_snowflake(value: Any) -> None:
    """Reject a Discord id outside 1..2^63-1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("A Discord id is an integer.", code="snowflake")
    if not 1 <= value <= SNOWFLAKE_MAX:
        raise ValidationError(
            "A Discord id is from 1 to 9223372036854775807 (got %(value)s).",
            code="snowflake",
            params={"value": _clip(str(value))},
        )


def _reject_control(value: str, pattern: re.Pattern[str]) -> None:
    match = pattern.search(value)
    if match is not None:
        raise ValidationError(
            "This text cannot contain the control character U+%(code)04X "
            "(at position %(position)s).",
            code="control_character",
            params={"code": ord(match.group()), "position": match.start() + 1},
        )


def validate_single_line(value: str) -> None:
    """Reject control characters (newlines and tabs included) in one-line text."""
    _reject_control(value, _CONTROL)


def validate_multiline(value: str) -> None:
    """Reject control characters other than newline, carriage return and tab."""
    _reject_control(value, _CONTROL_EXCEPT_NEWLINES)


def validate_api_key(value: str) -> None:
    """Reject an API key that is not printable ASCII without spaces (length: API_KEY_MAX)."""
    if not _API_KEY.fullmatch(value):
        raise ValidationError(
            "An API key is printable ASCII without spaces or control characters.",
            code="api_key",
        )


def validate_operator_key(text: str) -> None:
    """Reject a typed cache key with non-ASCII or control characters, or a huge number."""
    if not text.isascii() or _CONTROL.search(text):
        raise ValidationError(
            "A cache key is printable ASCII (ids are ASCII digits 0-9).",
            code="operator_key",
        )
    for run in _ASCII_DIGITS.findall(text):
        if len(run) > SNOWFLAKE_DIGITS or int(run) > SNOWFLAKE_MAX:
            raise ValidationError(
                "%(run)s is too large for an id (max 2^63-1).",
                code="operator_key",
                params={"run": _clip(run)},
            )


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _json_error(message: str, **params: Any) -> ValidationError:
    return ValidationError(message, code="json", params=params)


def _check_json_scalar(value: Any) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise _json_error("JSON text cannot contain a NUL character (\\u0000).")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _json_error("JSON numbers must be finite (no NaN or Infinity).")
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > JSON_INT_MAX:
            raise _json_error(
                "JSON integers are at most 2^63-1 in size (got %(digits)s digits).",
                digits=len(str(abs(value))),
            )
    elif value is not None and not isinstance(value, bool):
        raise _json_error("%(type)s is not a JSON value.", type=type(value).__name__)


def validate_json_value(value: Any) -> None:
    """Reject JSON that PostgreSQL or the readers cannot hold: NUL, NaN, huge, deep."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > JSON_MAX_DEPTH:
                raise _json_error(
                    "JSON is nested more than %(max)s levels deep.", max=JSON_MAX_DEPTH
                )
            children: Iterable[Any] = item
            if isinstance(item, dict):
                for key in item:
                    _check_json_scalar(key if isinstance(key, str) else str(key))
                children = item.values()
            stack.extend((child, depth + 1) for child in children)
        else:
            _check_json_scalar(item)


@deconstructible
class JsonShapeValidator:
    """Require a JSON list of strings ("list") or a JSON object ("object")."""

    def __init__(self, shape: str) -> None:
        assert shape in {"list", "object"}, shape
        self.shape = shape

    def __call__(self, value: Any) -> None:
        if self.shape == "object" and not isinstance(value, dict):
            raise _json_error("Enter a JSON object ({...}).")
        if self.shape == "list" and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise _json_error('Enter a JSON list of strings (["a", "b"]).')

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonShapeValidator) and other.shape == self.shape

    def __hash__(self) -> int:
        return hash(self.shape)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _parse_json_int(text: str) -> int:
    if len(text) > _JSON_NUMBER_MAX_CHARS:
        raise ValueError(f"a {len(text)}-digit integer is too large")
    return int(text)


def _parse_json_float(text: str) -> float:
    if len(text) > _JSON_NUMBER_MAX_CHARS:
        raise ValueError(f"a {len(text)}-character number is too long")
    return float(text)


def parse_json_text(text: str) -> Any:
    """Parse typed JSON safely (never RecursionError), then apply validate_json_value.

    Raise ValidationError with the reason, for a form to show.
    """
    if len(text) > JSON_MAX_CHARS:
        raise _json_error(
            "JSON text is limited to %(max)s characters.", max=JSON_MAX_CHARS
        )
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_parse_json_int,
            parse_float=_parse_json_float,
        )
    except RecursionError:
        raise _json_error(
            "JSON is nested more than %(max)s levels deep.", max=JSON_MAX_DEPTH
        ) from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise _json_error("Enter valid JSON: %(reason)s.", reason=str(exc)) from None
    validate_json_value(value)
    return value
