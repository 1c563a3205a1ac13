"""What the emergency clear will clear, sweep and preserve, from the registry policies."""

from __future__ import annotations

from dataclasses import dataclass

from caches.live import LiveDataUnavailable, live_snapshots
from caches.operations.commands import ensure_layers_loaded
from caches.registry import EmergencyPolicy, registry
from tomori.domain.knobs import knobs


@dataclass(frozen=True, slots=True)
class EmergencyPlan:
    """What the emergency clear will clear, sweep and preserve, from the policies."""

    cleared: list[str]
    expired_only: list[str]
    preserved: list[str]
    discord_volatile: bool
    live_fault: str | None = None  # the workers' policies could not be read


def emergency_plan(*, include_short_term_memory: bool = False) -> EmergencyPlan:
    """Return the caches the emergency clear empties, sweeps and keeps."""
    policies, fault = _known_policies()
    by_policy: dict[str, list[str]] = {p.value: [] for p in EmergencyPolicy}
    for name, policy in sorted(policies.items()):
        by_policy.setdefault(policy, []).append(name)
    expired = by_policy[EmergencyPolicy.EXPIRED_ONLY.value]
    cleared = by_policy[EmergencyPolicy.CLEAR.value]
    if include_short_term_memory:
        cleared, expired = sorted(cleared + expired), []
    return EmergencyPlan(
        cleared=cleared,
        expired_only=expired,
        preserved=by_policy[EmergencyPolicy.PRESERVE.value],
        discord_volatile=knobs().EMERGENCY_CACHE_CLEAR_DISCORD_VOLATILE,
        live_fault=fault,
    )


def _known_policies() -> tuple[dict[str, str], str | None]:
    # The workers' own snapshots are the truth; this process's registry fills gaps.
    ensure_layers_loaded()
    policies = {entry.name: entry.policy.value for entry in registry.entries()}
    try:
        snapshots = live_snapshots()
    except LiveDataUnavailable as exc:
        return policies, str(exc)
    for snapshot in snapshots:
        for name, stats in snapshot.caches.items():
            if stats.policy:
                policies[name] = stats.policy
    return policies, None
