"""Turn one knob's raw env string, or a test's Python override, into its typed value."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from tomori.domain.knobs.declare import PYTHON_TYPES, Knob
from tomori.domain.service_urls import http_url_or_none

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

# The kinds an empty value gives the default (or None) rather than an error.
_EMPTY_IS_UNSET = frozenset({"str", "url", "ip", "path"})


def parse_knob(knob: Knob, raw: str | None) -> tuple[Any, str | None]:
    """Return (value, error) for one raw env string; error names the variable."""
    if raw is None or (
        raw.strip() == "" and (knob.optional or knob.kind in _EMPTY_IS_UNSET)
    ):
        return (None if knob.optional else knob.default), None
    text = raw.strip()
    value = _convert(knob, text)
    if value is None or not _in_range(knob, value):
        return (
            knob.default,
            f"{knob.name}={raw!r} is invalid: expected {knob.expected()}.",
        )
    return value, None


def _convert(knob: Knob, text: str) -> Any:
    converters: dict[str, Callable[[str], Any]] = {
        "int": _to_int,
        "float": _to_float,
        "bool": _to_bool,
        "str": str,
        "url": http_url_or_none,
        "ip": _to_ip,
        "path": Path,
    }
    return converters[knob.kind](text)


def _to_int(text: str) -> int | None:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        return None


def _to_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _to_ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _to_bool(text: str) -> bool | None:
    word = text.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


def _in_range(knob: Knob, value: Any) -> bool:
    if knob.kind not in ("int", "float"):
        return True
    if knob.minimum is not None and value < knob.minimum:
        return False
    return knob.maximum is None or value <= knob.maximum


# What an override may be given as, where the field's own type is not all.
_ALSO_ACCEPTED: dict[str, tuple[type, ...]] = {
    "float": (int, float),
    "path": (str, Path),
}


def coerce_override(knob: Knob, value: Any) -> Any:
    """Return a Python value given for `knob` as its field's type, or raise.

    For a Django setting named like a knob (tests' overrides): the type is
    enforced, the operator's range is not (a test may want a tiny TTL).
    """
    if value is None and knob.optional and not knob.fallback:
        return None
    python_type = PYTHON_TYPES[knob.kind]
    accepted = _ALSO_ACCEPTED.get(knob.kind, (python_type,))
    is_bool = isinstance(value, bool)
    if isinstance(value, accepted) and is_bool == (knob.kind == "bool"):
        return python_type(value)
    raise ImproperlyConfigured(
        f"{knob.name}={value!r} is invalid: expected {knob.expected()}."
    )
