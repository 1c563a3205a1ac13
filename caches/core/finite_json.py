"""JSON every parser reads: non-finite floats become null, never NaN or Infinity."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "finite", "loads"]


def finite(obj: Any) -> Any:
    """Return `obj` with every NaN or infinite float (at any depth) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(value) for value in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """Return `json.dumps(obj, **kwargs)`, with non-finite floats written as null.

    The common case (nothing to replace) costs one strict dump; only a value
    holding NaN or an infinity is walked and dumped again.
    """
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(finite(obj), allow_nan=False, **kwargs)


def _reject(constant: str) -> float:
    raise ValueError(f"not JSON: {constant}")


def loads(text: str | bytes) -> Any:
    """Parse `text` as strict JSON: NaN, Infinity and -Infinity are rejected."""
    return json.loads(text, parse_constant=_reject)
