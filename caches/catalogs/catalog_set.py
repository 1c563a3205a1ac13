"""The four OpenRouter catalogs of one process, sharing one httpx client."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterator
from types import TracebackType
from typing import Any

from caches.catalogs.endpoints import CATALOG_NAMES, DEFAULT_BASE_URL, catalog_url
from caches.catalogs.entries import BasicModel, VideoModel
from caches.catalogs.httpx_client import httpx
from caches.catalogs.parsing import parse_basic_model, parse_video_model
from caches.catalogs.refresher import (
    DEFAULT_MIN_INTERVAL_SECONDS,
    DEFAULT_TTL_SECONDS,
    CatalogRefresher,
    Clock,
    OnRefreshed,
)
from caches.catalogs.text import TextCatalog

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 15.0


class CatalogSet:
    """The text, embedding, image and video catalogs, warmed and refreshed together."""

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        ttl: float = DEFAULT_TTL_SECONDS,
        min_interval: float = DEFAULT_MIN_INTERVAL_SECONDS,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_SECONDS,
        client: httpx.AsyncClient | None = None,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        on_refreshed: OnRefreshed | None = None,
    ) -> None:
        timeout = (
            timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        )
        self._owns_client = client is None
        self.client = (
            client if client is not None else httpx.AsyncClient(timeout=timeout)
        )
        common: dict[str, Any] = {
            "client": self.client,
            "api_key": api_key or None,
            "timeout": timeout,
            "ttl": ttl,
            "min_interval": min_interval,
            "clock": clock,
            "wall_clock": wall_clock,
            "on_refreshed": on_refreshed,
        }
        self.text = TextCatalog(url=catalog_url(base_url, "text"), **common)
        self.embedding: CatalogRefresher[BasicModel] = CatalogRefresher(
            "embedding",
            url=catalog_url(base_url, "embedding"),
            parse_entry=parse_basic_model,
            **common,
        )
        self.image: CatalogRefresher[BasicModel] = CatalogRefresher(
            "image",
            url=catalog_url(base_url, "image"),
            parse_entry=parse_basic_model,
            **common,
        )
        self.video: CatalogRefresher[VideoModel] = CatalogRefresher(
            "video",
            url=catalog_url(base_url, "video"),
            parse_entry=parse_video_model,
            **common,
        )

    def __getitem__(self, name: str) -> CatalogRefresher[Any]:
        """Return the catalog called `name` ("text", "embedding", "image", "video")."""
        if name not in CATALOG_NAMES:
            raise KeyError(name)
        catalog: CatalogRefresher[Any] = getattr(self, name)
        return catalog

    def __iter__(self) -> Iterator[CatalogRefresher[Any]]:
        """Iterate over the catalogs, text first."""
        return (self[name] for name in CATALOG_NAMES)

    async def warm(self) -> dict[str, bool]:
        """Fetch the text catalog, then the other three in parallel; never raise.

        A catalog that fails stays recoverable: its next miss reaches the network
        (once the rate limit allows).
        """
        results = {"text": await self.text.refresh()}
        others: list[CatalogRefresher[Any]] = [self.embedding, self.image, self.video]
        results |= await self._gather_each({c.name: c.refresh() for c in others})
        return results

    async def refresh_stale(self) -> dict[str, bool]:
        """Refresh every catalog whose TTL ran out; return which refreshes succeeded."""
        return await self._gather_each({c.name: c.refresh_if_stale() for c in self})

    def status(self) -> dict[str, dict[str, Any]]:
        """Return each catalog's status() by name."""
        return {catalog.name: catalog.status() for catalog in self}

    def set_clock(self, clock: Clock) -> None:
        """Give every catalog another monotonic clock (tests)."""
        for catalog in self:
            catalog.set_clock(clock)

    async def aclose(self) -> None:
        """Close the httpx client if this set created it."""
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> CatalogSet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @staticmethod
    async def _gather_each(calls: dict[str, Awaitable[bool]]) -> dict[str, bool]:
        outcomes = await asyncio.gather(*calls.values(), return_exceptions=True)
        results: dict[str, bool] = {}
        for name, outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                logger.error("catalog %s: refresh raised", name, exc_info=outcome)
            results[name] = outcome is True
        return results
