"""Django side of the catalogs: settings, snapshot storage, the refresh job, the bus.

The only module of `caches.catalogs` that imports Django. Celery beat runs
`refresh_and_store`: it fetches the stale catalogs, stores each successful,
non-empty fetch as a snapshot row and announces it on the bus; each bot
worker then loads that row and swaps it in (`reload_snapshot` op). A worker
starting up serves the stored snapshots before it touches the network.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from caches.catalogs.catalog_set import CatalogSet
from caches.catalogs.endpoints import CATALOG_NAMES
from caches.catalogs.outcomes import RefreshOutcome, format_age, summarize
from caches.catalogs.refresher import OnRefreshed
from caches.core.loop import call_on_loop
from caches.database import run_db
from caches.invalidation import Event, record
from caches.registry import EmergencyPolicy, registry
from tomori.domain.knobs import knobs
from tomori.domain.repositories.catalogs import (
    catalog_snapshot_times,
    load_catalog_snapshots,
    save_catalog_snapshot,
)

logger = logging.getLogger(__name__)

RELOAD_OP = "reload_snapshot"


def registry_name(catalog: str) -> str:
    """Return the registry name of a catalog ("text" -> "openrouter_text")."""
    return f"openrouter_{catalog}"


def build_catalog_set(
    *, on_refreshed: OnRefreshed | None = None, **overrides: Any
) -> CatalogSet:
    """Return a CatalogSet configured from the OPENROUTER_* settings (ms become seconds)."""
    options: dict[str, Any] = {
        "base_url": knobs().OPENROUTER_BASE_URL,
        "api_key": knobs().OPENROUTER_API_KEY or None,
        "ttl": knobs().OPENROUTER_CATALOG_TTL_MS / 1000,
        "min_interval": knobs().OPENROUTER_CATALOG_REFRESH_MIN_INTERVAL_MS / 1000,
        "timeout": knobs().OPENROUTER_HTTP_TIMEOUT_SECONDS,
        "on_refreshed": on_refreshed,
    }
    return CatalogSet(**(options | overrides))


async def load_stored_snapshots(
    catalogs: CatalogSet, names: list[str] | None = None
) -> dict[str, bool]:
    """Swap in the stored snapshots newer than what serves; a database error loads nothing."""
    try:
        stored = await run_db(load_catalog_snapshots, names)
    except Exception as exc:  # noqa: BLE001 (a worker must start even with the DB down)
        logger.warning("could not load stored catalog snapshots: %s", exc)
        return {}
    return {
        name: catalogs[name].load_snapshot(models, fetched_at.timestamp())
        for name, (models, fetched_at) in stored.items()
    }


_registered: CatalogSet | None = None


def is_openrouter_capability_cache_ready() -> bool:
    """Return whether this process holds a usable text-model catalog snapshot.

    It says nothing about any one model: a lookup can still miss on a ready
    catalog (spec section 7).
    """
    return _registered is not None and _registered.text.is_ready()


def register_catalogs(catalogs: CatalogSet, *, loop: asyncio.AbstractEventLoop) -> None:
    """Register the four catalogs (policy preserve) with a `reload_snapshot` op."""
    global _registered
    _registered = catalogs
    for catalog in catalogs:
        name = catalog.name

        def reload(*_: Any, _name: str = name) -> int:
            call_on_loop(loop, _start_reload, catalogs, _name, loop)
            return 0

        registry.register(
            registry_name(name),
            catalog,
            policy=EmergencyPolicy.PRESERVE,
            invalidatable=False,
            description=f"OpenRouter {name} catalog (codename -> model metadata)",
            key_help="a model codename, e.g. openai/gpt-4o",
            ops={RELOAD_OP: reload},
        )


_reloads: set[asyncio.Task[dict[str, bool]]] = set()


def _start_reload(
    catalogs: CatalogSet, name: str, loop: asyncio.AbstractEventLoop
) -> None:
    if loop.is_closed():  # checked first: no coroutine is made to be dropped
        raise RuntimeError(f"cannot reload the {name} catalog: its loop is closed")
    # Keep a reference until done: the loop holds tasks only weakly.
    task = loop.create_task(load_stored_snapshots(catalogs, [name]))
    _reloads.add(task)
    task.add_done_callback(_reloads.discard)


async def store_snapshot(name: str, models: list[Any]) -> None:
    """Store a worker's own successful fetch (an `on_refreshed` callback). Never raises."""
    try:
        await run_db(save_catalog_snapshot, name, models, fetched_at=datetime.now(UTC))
    except Exception as exc:  # noqa: BLE001
        logger.warning("could not store the %s catalog snapshot: %s", name, exc)


def refresh_and_store(
    *, force: bool = False, catalogs: CatalogSet | None = None
) -> dict[str, str]:
    """Fetch the stale (or, forced, all) catalogs; store and announce each success.

    Staleness is the stored snapshot's age against OPENROUTER_CATALOG_TTL_MS
    (read without loading the payloads). Returns {catalog: "refreshed" |
    "fresh" | "failed"} and logs one line saying why each catalog was not
    refreshed. A failed fetch stores and announces nothing, so workers keep
    serving what they have.
    """
    catalogs = catalogs or build_catalog_set()
    ages = _stored_ages()
    due = _due_catalogs(ages, force=force)
    fetched: dict[str, list[Any]] = {}

    async def on_refreshed(name: str, models: list[Any]) -> None:
        fetched[name] = models

    for catalog in catalogs:
        catalog.on_refreshed = on_refreshed
    outcomes = asyncio.run(_refresh(catalogs, due, ages))
    for name, models in fetched.items():
        with transaction.atomic():
            save_catalog_snapshot(name, models, fetched_at=datetime.now(UTC))
            record([Event(registry_name(name), RELOAD_OP, ())])
    reasons = {name: outcome.reason for name, outcome in outcomes.items()}
    logger.info("catalogs: %s", summarize(reasons, ok="refreshed"))
    return {
        name: _verdict(outcome, due=name in due) for name, outcome in outcomes.items()
    }


def _stored_ages() -> dict[str, timedelta]:
    now = datetime.now(UTC)
    return {name: now - at for name, at in catalog_snapshot_times().items()}


def _due_catalogs(ages: dict[str, timedelta], *, force: bool) -> set[str]:
    if force:
        return set(CATALOG_NAMES)
    ttl = _ttl()
    return {name for name in CATALOG_NAMES if name not in ages or ages[name] >= ttl}


def _ttl() -> timedelta:
    return timedelta(milliseconds=knobs().OPENROUTER_CATALOG_TTL_MS)


def _already_fresh(ages: list[timedelta]) -> RefreshOutcome:
    # One reason for every fresh catalog (they share a clause): the oldest age.
    oldest = format_age(max(ages).total_seconds())
    ttl = format_age(_ttl().total_seconds())
    return RefreshOutcome(
        False, f"already fresh (stored at most {oldest} ago, TTL {ttl})"
    )


def _verdict(outcome: RefreshOutcome, *, due: bool) -> str:
    if outcome.refreshed:
        return "refreshed"
    return "failed" if due else "fresh"


async def _refresh(
    catalogs: CatalogSet, due: set[str], ages: dict[str, timedelta]
) -> dict[str, RefreshOutcome]:
    outcomes: dict[str, RefreshOutcome] = {}
    fresh = [ages[name] for name in CATALOG_NAMES if name not in due]
    try:
        for name in CATALOG_NAMES:
            if name not in due:
                outcomes[name] = _already_fresh(fresh)
                continue
            outcomes[name] = await catalogs[name].refresh_with_reason(force=True)
    finally:
        await catalogs.aclose()
    return outcomes
