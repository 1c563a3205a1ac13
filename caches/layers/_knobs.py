"""Knobs a layer declares in its own module, read and checked like the domain's.

Most cache knobs are fields of `tomori.domain.knobs.Knobs` (the domain's table),
because code besides the layer reads them. A knob only its layer reads can
be declared with the layer instead (`Layer(knobs=(layer_cap(...), ...))`),
so adding a layer is one module: its values come from the environment (or
an `override_settings` of the same name), a bad value is a `caches.E001`
system check error naming the variable, and docs/settings.md lists it.
"""

from __future__ import annotations

import os
from typing import Any

from tomori.domain.knobs import KNOBS_BY_NAME, Knob, coerce_override, parse_knob

#: The settings doc's title for the knobs layers declare themselves.
GROUP = "Cache layers declaring their own knobs"
_CAP_HELP = (
    "Entry cap of the {what}; inserting at the cap evicts expired entries "
    "first, then the oldest-inserted."
)


def layer_cap(name: str, default: int, what: str) -> Knob:
    """Declare a layer's own entry-cap knob (`what` names the map, in the help)."""
    return Knob(name, "int", default, _CAP_HELP.format(what=what), GROUP, 1, 10_000_000)


def layer_minutes(name: str, default: int, help: str) -> Knob:
    """Declare a layer's own TTL knob, in minutes (at least 1)."""
    return Knob(name, "int", default, help, GROUP, minimum=1)


def own_knobs() -> dict[str, Knob]:
    """Return every knob a layer declares itself, by name."""
    from caches.layers import declared_layers

    return {k.name: k for layer in declared_layers().values() for k in layer.knobs}


def read(knob: Knob) -> Any:
    """Return a layer knob's value: an override setting, else the environment.

    An invalid environment value reads as the default; `errors()` reports it.
    """
    from django.conf import settings

    if hasattr(settings, knob.name):
        return coerce_override(knob, getattr(settings, knob.name))
    return parse_knob(knob, os.environ.get(knob.name))[0]


def errors() -> list[str]:
    """Return a message per layer knob that is malformed or clashes with the domain's."""
    found = []
    for knob in own_knobs().values():
        if knob.name in KNOBS_BY_NAME:
            found.append(
                f"{knob.name} is declared by a layer and in tomori.domain.knobs"
            )
        error = parse_knob(knob, os.environ.get(knob.name))[1]
        if error:
            found.append(error)
    return found
