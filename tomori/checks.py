"""System checks: invalid settings stop start-up with the variable's name."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError

logger = logging.getLogger(__name__)


@checks.register(checks.Tags.compatibility, "tomori")
def check_knobs(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Report every env knob that failed to parse or contradicts another."""
    return [
        checks.Error(message, id="caches.E001", hint="See docs/settings.md.")
        for message in settings.KNOB_ERRORS
    ]


@checks.register(checks.Tags.security, "tomori")
def check_crypto_keys(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Require the webhook-token encryption keys outside DEBUG."""
    current = settings.CRYPTO_SECRET_CURRENT
    if not current:
        if settings.DEBUG:
            return []
        return [
            checks.Error(
                "CRYPTO_SECRET_CURRENT is not set: stored webhook tokens cannot be "
                "encrypted. Set CRYPTO_SECRET_V1=<secret> and CRYPTO_SECRET_CURRENT=1.",
                id="caches.E002",
            )
        ]
    if not current.isdigit() or int(current) not in settings.CRYPTO_SECRETS:
        return [
            checks.Error(
                f"CRYPTO_SECRET_CURRENT={current!r} is invalid: expected the number n "
                f"of a set CRYPTO_SECRET_V<n> (set: {sorted(settings.CRYPTO_SECRETS)}).",
                id="caches.E002",
            )
        ]
    return []


@checks.register(checks.Tags.database, "tomori")
def check_webhook_key_versions(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Warn about stored webhook tokens under key versions with no secret set.

    Reads the database, so it runs only when asked to (`check --database
    default`, `migrate`, `runbot`), like Django's own database checks.
    """
    if not databases or DEFAULT_DB_ALIAS not in databases:
        return []
    from caches.layers.webhook import describe_missing_keys, webhooks_under_missing_keys
    from caches.operations.faults import first_line

    try:
        counts = webhooks_under_missing_keys()
    except DatabaseError as exc:  # not migrated yet, or unreachable: others say so
        logger.info("check caches.W010 skipped: %s", first_line(exc))
        return []
    if not counts:
        return []
    return [
        checks.Warning(
            describe_missing_keys(counts),
            hint="Rows are never deleted for a missing key; restore the secret, "
            "or delete the rows in the admin (Managed webhooks) if it is lost.",
            id="caches.W010",
        )
    ]


def raise_on_invalid_settings() -> None:
    """Stop a process that does not run Django's checks (Celery, scripts)."""
    errors = checks.run_checks(tags=["tomori"])
    serious = [e for e in errors if e.level >= checks.ERROR]
    if serious:
        lines = "\n".join(f"  {e.id}: {e.msg}" for e in serious)
        raise ImproperlyConfigured(f"Invalid settings:\n{lines}")
