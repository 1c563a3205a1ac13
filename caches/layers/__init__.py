"""Cache layers, one module per layer of the spec; importing a layer registers it."""

from __future__ import annotations

import importlib
import logging
import pkgutil

logger = logging.getLogger(__name__)


def layer_modules() -> list[str]:
    """Return the names of every layer module in this package."""
    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
    )


def load_all(*, strict: bool = True) -> list[str]:
    """Import every layer so the registry knows it; return the modules loaded.

    strict=False (the admin) logs a layer that fails to import and goes on.
    """
    loaded = []
    for name in layer_modules():
        try:
            importlib.import_module(f"{__name__}.{name}")
        except Exception:
            if strict:
                raise
            logger.exception("could not import cache layer %s", name)
            continue
        loaded.append(name)
    return loaded
