"""OpenRouter model catalogs (spec section 7): text, embedding, image and video.

No Django imports here or in any module but `service.py`.
"""

from caches.catalogs.catalog_set import CatalogSet
from caches.catalogs.endpoints import CATALOG_NAMES, CATALOG_PATHS, DEFAULT_BASE_URL
from caches.catalogs.entries import (
    BasicModel,
    Pricing,
    TextModel,
    TokenLimits,
    VideoModel,
    normalize_codename,
)
from caches.catalogs.fetch import CatalogFetchError, fetch_models_payload
from caches.catalogs.refresher import CatalogRefresher
from caches.catalogs.text import TextCatalog

__all__ = [
    "CATALOG_NAMES",
    "CATALOG_PATHS",
    "DEFAULT_BASE_URL",
    "BasicModel",
    "CatalogFetchError",
    "CatalogRefresher",
    "CatalogSet",
    "Pricing",
    "TextCatalog",
    "TextModel",
    "TokenLimits",
    "VideoModel",
    "fetch_models_payload",
    "normalize_codename",
]
