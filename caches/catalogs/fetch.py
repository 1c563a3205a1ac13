"""Fetch one OpenRouter catalog with httpx and turn its payload into a keyed map."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from caches.catalogs.entries import normalize_codename
from caches.catalogs.httpx_client import httpx

DEFAULT_TIMEOUT = httpx.Timeout(15.0)


class CatalogEntry(Protocol):
    """What the refresh machine needs of an entry: the codename it is published under."""

    @property
    def id(self) -> str: ...


E = TypeVar("E", bound=CatalogEntry)


class CatalogFetchError(Exception):
    """A fetch or parse that must not replace the serving catalog; the message says why."""


async def fetch_models_payload(
    client: httpx.AsyncClient,
    url: str,
    *,
    api_key: str | None = None,
    timeout: httpx.Timeout = DEFAULT_TIMEOUT,
) -> list[Any]:
    """GET one catalog endpoint once (no retries) and return its `data` array.

    Raise CatalogFetchError on a timeout, a connection error, a non-2xx answer,
    malformed JSON or a payload without a `data` array.
    """
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        response = await client.get(url, headers=headers, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise CatalogFetchError(f"timeout ({type(exc).__name__})") from exc
    except httpx.HTTPError as exc:
        raise CatalogFetchError(f"network error ({type(exc).__name__}: {exc})") from exc
    if not response.is_success:
        raise CatalogFetchError(f"HTTP {response.status_code}")
    try:
        payload = response.json()
    except ValueError as exc:
        raise CatalogFetchError("malformed JSON") from exc
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise CatalogFetchError("payload without a data array")
    return data


def build_entries(
    payload_models: object, parse_entry: Callable[[object], E | None]
) -> dict[str, E]:
    """Parse a `data` array into a map keyed by normalised codename.

    Raise CatalogFetchError when no item is a usable model: an empty catalog is
    an outage, not news, and must not replace one that works.
    """
    if not isinstance(payload_models, list):
        raise CatalogFetchError("payload without a data array")
    entries: dict[str, E] = {}
    for item in payload_models:
        entry = parse_entry(item)
        if entry is not None:
            entries[normalize_codename(entry.id)] = entry
    if not entries:
        raise CatalogFetchError("no usable models")
    return entries
