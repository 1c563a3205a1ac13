"""Every operational env knob: name, type, default, range and meaning, declared once.

Each knob is one typed field of a group class (`cache_layers.py`, `process.py`,
`observability.py`) whose `knob()`, `minutes()` or `cap()` declaration carries
the default, range and help; `Knobs`, the frozen object the code reads, is made
of the groups, and `KNOBS`, the table of rows, is derived from its fields (the
kind from the annotation). Read a knob one way, everywhere:

    from tomori.domain.knobs import knobs
    ttl = knobs().USER_CACHE_TTL_MINUTES

`tomori/settings.py` builds the object from the environment (`load_knobs`)
into the one Django setting `TOMORI_KNOBS`. Parsing never raises: a bad value
is recorded in `KNOB_ERRORS` and `tomori.checks` reports it as a system check
error naming the variable, so `manage.py check`, `runbot` and the Celery
processes all refuse to start with every problem listed at once.

`knobs()` returns `settings.TOMORI_KNOBS` with any Django setting named like
a knob laid over it (only tests define those, through `override_settings`
or pytest-django's `settings` fixture); a `setting_changed` receiver drops
the cached object, so an override takes effect at the next `knobs()`.

`make docs` (`manage.py settings_doc --write`) renders docs/settings.md from
the declarations; a test fails when that file is stale.
"""

from tomori.domain.knobs.current import knobs
from tomori.domain.knobs.declare import (
    PYTHON_TYPES,
    Knob,
    cap,
    knob,
    knob_table,
    minutes,
)
from tomori.domain.knobs.doc import markdown_table, settings_doc
from tomori.domain.knobs.parse import (
    FALSE_WORDS,
    TRUE_WORDS,
    coerce_override,
    parse_knob,
)
from tomori.domain.knobs.table import (
    DEBUG_KNOB,
    KNOBS,
    KNOBS_BY_NAME,
    Knobs,
    cross_field_errors,
    load_knobs,
    read_knobs,
)

__all__ = [
    "DEBUG_KNOB",
    "FALSE_WORDS",
    "KNOBS",
    "KNOBS_BY_NAME",
    "PYTHON_TYPES",
    "TRUE_WORDS",
    "Knob",
    "Knobs",
    "cap",
    "coerce_override",
    "cross_field_errors",
    "knob",
    "knob_table",
    "knobs",
    "load_knobs",
    "markdown_table",
    "minutes",
    "parse_knob",
    "read_knobs",
    "settings_doc",
]
