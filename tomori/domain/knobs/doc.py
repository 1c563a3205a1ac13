"""docs/settings.md, rendered from the declarations (`make docs` writes it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tomori.domain.knobs.declare import Knob
from tomori.domain.knobs.services import SERVICE_SETTINGS
from tomori.domain.knobs.table import KNOBS

DOC_PATH = "docs/settings.md"
REGENERATE = "make docs"

_INTRO = f"""\
# Settings

<!-- Generated from tomori/domain/knobs/ by `{REGENERATE}`: edit the declarations, not this file. -->

Settings are read once, in `tomori/settings.py` (django-environ; the `.env`
file at the repository root, or `TOMORI_ENV_FILE`, is read without overriding
the environment). Every operational knob is declared once, as a typed field
of `tomori.domain.knobs.Knobs` in its group (`tomori/domain/knobs/cache_layers.py`,
`process.py`, `observability.py`), and the code reads them as one typed,
frozen object, `tomori.domain.knobs.knobs()` (tests change one with
`override_settings(NAME=value)`). A cache layer names the knobs it is built
from in its declaration (`Layer(settings=...)`); the tables below say which
layers read each one.

A malformed or out-of-range value stops start-up: `manage.py check`, `runbot`,
`migrate` and the Celery processes report every bad variable at once
(system check `caches.E001`, naming the variable, its value and what is
expected). The spec's silent fallbacks (a non-numeric TTL that disables expiry,
"0" meaning the default) are deliberately not copied. Booleans, `DEBUG`
included, accept only 1/true/yes/on and 0/false/no/off (any case): `DEBUG=maybe`
stops start-up at once with a message naming `DEBUG`, since it decides
whether `SECRET_KEY` is required. URL knobs must be `http://` or `https://`
URLs with a host, and `REDIS_URL` a `redis://`, `rediss://` or `unix://` URL
with an integer database number.
"""


def settings_doc(
    readers: Mapping[str, Sequence[str]] | None = None, own: Sequence[Knob] = ()
) -> str:
    """Return docs/settings.md: the services table, then every knob by group.

    `readers` maps a knob to the cache layers built from it (the command that
    writes the doc takes it from the layers' declarations).
    """
    services = ["## Process and services", "", "| variable | default | effect |"]
    services.append("|---|---|---|")
    services += [f"| {s.name} | {s.default} | {s.effect} |" for s in SERVICE_SETTINGS]
    knob_tables = markdown_table(readers, heading="##", extra=own)
    return "\n".join([_INTRO, *services, "", knob_tables])


def markdown_table(
    readers: Mapping[str, Sequence[str]] | None = None,
    *,
    heading: str = "####",
    extra: Sequence[Knob] = (),
) -> str:
    """Render the knobs' tables, one per group, each under a `heading` title."""
    lines: list[str] = []
    group = None
    for knob in (*KNOBS, *extra):
        if knob.group != group:
            group = knob.group
            lines += ["", f"{heading} {group}", ""]
            lines += ["| variable | default | accepted | effect |", "|---|---|---|---|"]
        effect = knob.help + _read_by((readers or {}).get(knob.name, ()))
        lines.append(
            f"| `{knob.name}` | {_default(knob)} | {knob.expected()} | {effect} |"
        )
    return "\n".join(lines).strip() + "\n"


def _default(knob: Knob) -> str:
    if isinstance(knob.default, bool):
        return f"`{str(knob.default).lower()}`"
    return "unset" if knob.default in (None, "") else f"`{knob.default}`"


def _read_by(layers: Sequence[str]) -> str:
    if not layers:
        return ""
    names = ", ".join(f"`{name}`" for name in layers)
    return f" Layer{'s' if len(layers) > 1 else ''}: {names}."
