"""Render docs/settings.md from the knob declarations and the layers' settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from caches.layers import declared_layers
from tomori.domain.knobs.doc import DOC_PATH, REGENERATE, settings_doc


def layers_by_knob() -> dict[str, list[str]]:
    """Return, for each knob a layer declares, the layers built from it (module order)."""
    readers: dict[str, list[str]] = {}
    for layer in declared_layers().values():
        for name in layer.settings:
            readers.setdefault(name, []).append(layer.name)
    return readers


def rendered_doc() -> str:
    """Return docs/settings.md as the declarations give it now."""
    from caches.layers._knobs import own_knobs

    return settings_doc(layers_by_knob(), own=tuple(own_knobs().values()))


class Command(BaseCommand):
    help = (
        f"Print {DOC_PATH} as the declarations give it; --write writes it, "
        "--check fails when it is stale."
    )
    # The doc depends on the declarations only, not on this environment's values.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--write", action="store_true", help=f"write {DOC_PATH}")
        mode.add_argument(
            "--check", action="store_true", help=f"fail if {DOC_PATH} is stale"
        )
        parser.add_argument(
            "--path",
            default=str(Path(settings.BASE_DIR) / DOC_PATH),
            help="the file --write and --check use",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        text = rendered_doc()
        target = Path(options["path"])
        if options["write"]:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            self.stdout.write(f"wrote {target}")
        elif options["check"]:
            if not target.is_file() or target.read_text() != text:
                raise CommandError(f"{target} is stale: run `{REGENERATE}`.")
            self.stdout.write(f"{target} is current")
        else:
            self.stdout.write(text, ending="")
