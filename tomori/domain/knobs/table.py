"""The knob table: `Knobs` made of the groups, its rows, and how the environment fills it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tomori.domain.knobs.cache_layers import (
    CacheKnobs,
    PersonaSpriteKnobs,
    ShortTermMemoryKnobs,
)
from tomori.domain.knobs.declare import Knob, knob_table
from tomori.domain.knobs.observability import (
    InvalidationKnobs,
    MetricsKnobs,
    PrometheusKnobs,
)
from tomori.domain.knobs.parse import parse_knob
from tomori.domain.knobs.process import (
    DatabaseKnobs,
    DiscordKnobs,
    LibvipsKnobs,
    MemoryGuardKnobs,
    OpenRouterKnobs,
)


# The bases are the groups in the order the settings doc lists them.
@dataclass(frozen=True, slots=True, kw_only=True)
class Knobs(
    CacheKnobs,
    ShortTermMemoryKnobs,
    DatabaseKnobs,
    PersonaSpriteKnobs,
    MemoryGuardKnobs,
    MetricsKnobs,
    OpenRouterKnobs,
    LibvipsKnobs,
    DiscordKnobs,
    InvalidationKnobs,
    PrometheusKnobs,
):
    """Every knob's value, typed: one field per knob, declared in its group.

    Built by `load_knobs` (from the environment) and read through `knobs()`.
    A knob with a fallback (PERSONA_SPRITE_CACHE_TTL_MINUTES) holds the
    resolved value.
    """


KNOBS: tuple[Knob, ...] = knob_table(Knobs)
KNOBS_BY_NAME: dict[str, Knob] = {knob.name: knob for knob in KNOBS}

# Parsed by the same rules, but outside the table: settings.py reads it first
# (it decides whether SECRET_KEY is required) and stops at once on a bad value.
DEBUG_KNOB = Knob(
    "DEBUG",
    "bool",
    False,
    "Development mode. Allows the built-in dev SECRET_KEY and missing crypto keys.",
    "Process and services",
)


def read_knobs(env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Parse every knob from env; return the values and the list of errors."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    for knob in KNOBS:
        value, error = parse_knob(knob, env.get(knob.name))
        values[knob.name] = value
        if error:
            errors.append(error)
    for knob in KNOBS:
        if knob.fallback and values[knob.name] is None:
            values[knob.name] = values[knob.fallback]
    errors.extend(cross_field_errors(values))
    return values, errors


def cross_field_errors(values: Mapping[str, Any]) -> list[str]:
    """Return errors for combinations of valid values that contradict each other."""
    errors = []
    warning = values["MEMORY_WARNING_THRESHOLD"]
    critical = values["MEMORY_CRITICAL_THRESHOLD"]
    if warning >= critical:
        errors.append(
            f"MEMORY_WARNING_THRESHOLD={warning} must be below "
            f"MEMORY_CRITICAL_THRESHOLD={critical}."
        )
    table_ttl_ms = values["MARKDOWN_TABLE_CACHE_TTL_MINUTES"] * 60_000
    if values["MARKDOWN_TABLE_BUTTON_TIMEOUT_MS"] > table_ttl_ms:
        errors.append(
            f"MARKDOWN_TABLE_BUTTON_TIMEOUT_MS={values['MARKDOWN_TABLE_BUTTON_TIMEOUT_MS']} "
            f"must not exceed MARKDOWN_TABLE_CACHE_TTL_MINUTES "
            f"({values['MARKDOWN_TABLE_CACHE_TTL_MINUTES']} min = {table_ttl_ms} ms), "
            "or the button outlives its entry."
        )
    return errors


def load_knobs(env: Mapping[str, str]) -> tuple[Knobs, list[str]]:
    """Return the knobs parsed from `env` and the errors (invalid values are defaults)."""
    values, errors = read_knobs(env)
    return Knobs(**values), errors
