"""The four OpenRouter catalogs by name, and where each one is published."""

from __future__ import annotations

DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"

# One catalog per modality (spec section 7); the text catalog lists no
# embedding models, so each capability is checked against its own endpoint.
CATALOG_PATHS: dict[str, str] = {
    "text": "/models",
    "embedding": "/embeddings/models",
    "image": "/images/models",
    "video": "/videos/models",
}
CATALOG_NAMES: tuple[str, ...] = tuple(CATALOG_PATHS)


def catalog_url(base_url: str, name: str) -> str:
    """Return the endpoint URL of catalog `name` under `base_url` (e.g. `.../api/v1`)."""
    return base_url.rstrip("/") + CATALOG_PATHS[name]
