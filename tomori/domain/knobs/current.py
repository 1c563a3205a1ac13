"""`knobs()`: the current knobs, with tests' overrides laid over them, cached."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from tomori.domain.knobs.parse import coerce_override
from tomori.domain.knobs.table import KNOBS, KNOBS_BY_NAME, Knobs

_current: Knobs | None = None


def knobs() -> Knobs:
    """Return the current knobs (see the `tomori.domain.knobs` docstring)."""
    global _current
    current = _current
    if current is None:
        current = _current = _from_settings()
    return current


def _from_settings() -> Knobs:
    from django.conf import settings

    base = getattr(settings, "TOMORI_KNOBS", None)
    if not isinstance(base, Knobs):
        raise ImproperlyConfigured(
            "TOMORI_KNOBS is not a tomori.domain.knobs.Knobs: the settings module must "
            "set TOMORI_KNOBS, KNOB_ERRORS = load_knobs(os.environ)."
        )
    overrides = {
        knob.name: coerce_override(knob, getattr(settings, knob.name))
        for knob in KNOBS
        if hasattr(settings, knob.name)
    }
    return replace(base, **overrides) if overrides else base


def _drop_on_change(*, setting: str, **kwargs: Any) -> None:
    """Forget the current knobs when a test changes TOMORI_KNOBS or a knob."""
    global _current
    if setting == "TOMORI_KNOBS" or setting in KNOBS_BY_NAME:
        _current = None


setting_changed.connect(
    _drop_on_change, dispatch_uid="tomori.domain.knobs.drop_on_change"
)
