"""Service URLs from the environment: checks for http(s) and Redis URLs, the bus channel default."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

HTTP_SCHEMES = frozenset({"http", "https"})
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
BUS_CHANNEL_PREFIX = "tomori:bus"


def http_url_or_none(text: str) -> str | None:
    """Return `text` if it is an http(s) URL with a host, else None."""
    if not text or any(c.isspace() for c in text):
        return None
    try:
        parts = urlsplit(text)
        host = parts.hostname
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        return None
    return text if parts.scheme.lower() in HTTP_SCHEMES and host else None


def redis_url_error(url: str) -> str | None:
    """Return why `url` is not a usable REDIS_URL (naming the variable), or None."""
    if not url:
        return None
    expected = (
        "expected redis://[:password@]host[:port][/db], rediss://... "
        "or unix:///path[?db=n]"
    )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
        db = redis_db_number(url)
    except ValueError:
        return f"REDIS_URL={url!r} is invalid: {expected}."
    scheme = parts.scheme.lower()
    located = parts.path if scheme == "unix" else parts.hostname
    if scheme not in REDIS_SCHEMES or not located or db < 0:
        return f"REDIS_URL={url!r} is invalid: {expected}."
    return None


def redis_db_number(url: str) -> int:
    """Return the database number a Redis URL selects (0 when it names none).

    Like redis-py: `?db=n` wins, else the path `/n` (not for unix sockets,
    whose path is the socket). Raises ValueError when it is not an integer.
    """
    parts = urlsplit(url)
    query = parse_qs(parts.query).get("db")
    if query:
        return int(query[0])
    path = parts.path.strip("/")
    if parts.scheme.lower() == "unix" or not path:
        return 0
    return int(path)


def default_bus_channel(redis_url: str) -> str:
    """Return the bus channel for `redis_url`: pub/sub ignores the db, so the name carries it."""
    try:
        db = redis_db_number(redis_url) if redis_url else 0
    except ValueError:
        db = 0  # REDIS_URL itself is reported as invalid (caches.E001)
    return f"{BUS_CHANNEL_PREFIX}:db{db}"


def describe_redis_url(url: str) -> str:
    """Return `url` without its password, for messages an operator reads."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        db = redis_db_number(url)
    except ValueError:
        return "the configured REDIS_URL"
    if parts.scheme == "unix":
        return f"unix://{parts.path}?db={db}"
    return f"{parts.scheme}://{parts.hostname}{port}/{db}"
