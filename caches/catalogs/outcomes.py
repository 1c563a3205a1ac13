"""What a catalog refresh did and, when it replaced nothing, why: one line per run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RATE_LIMITED = "rate-limited"


@dataclass(frozen=True, slots=True)
class RefreshOutcome:
    """Whether a refresh replaced the serving catalog; `reason` says why not."""

    refreshed: bool
    reason: str | None = None


def format_age(seconds: float) -> str:
    """Return an age as "45 s", "12 min" or "3.5 h"."""
    if seconds < 90:
        return f"{max(seconds, 0.0):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def summarize(
    reasons: Mapping[str, str | None], *, ok: str = "ok", force_hint: str = ""
) -> str:
    """Return "text ok, image ok; embedding, video not refreshed: <reason>".

    `reasons` maps each catalog to None (refreshed) or why it was not; catalogs
    sharing a reason share a clause. `force_hint` (" (use --fresh)") follows a
    rate-limit reason.
    """
    done = [f"{name} {ok}" for name, reason in reasons.items() if reason is None]
    grouped: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        if reason is not None:
            grouped.setdefault(reason, []).append(name)
    clauses = [", ".join(done)] if done else []
    for reason, names in grouped.items():
        hint = force_hint if reason.startswith(RATE_LIMITED) else ""
        clauses.append(f"{', '.join(names)} not refreshed: {reason}{hint}")
    return "; ".join(clauses) or "none"
