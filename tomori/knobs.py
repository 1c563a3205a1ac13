"""Every operational env knob: name, type, default, range and meaning, in one table.

`KNOBS` is the table. `Knobs` is the typed, frozen object the code reads, one
field per row with the Python type of the row's kind (checked against the
table at import, so the two cannot drift). Read a knob one way, everywhere:

    from tomori.knobs import knobs
    ttl = knobs().USER_CACHE_TTL_MINUTES

`tomori/settings.py` builds the object from the environment (`load_knobs`)
into the one Django setting `TOMORI_KNOBS`. Parsing never raises: a bad value
is recorded in `KNOB_ERRORS` and `tomori.checks` reports it as a system check
error naming the variable, so `manage.py check`, `runbot` and the Celery
processes all refuse to start with every problem listed at once.

`knobs()` returns `settings.TOMORI_KNOBS` with any Django setting named like
a knob laid over it (only tests define those, through `override_settings`
or pytest-django's `settings` fixture); a `setting_changed` receiver drops
the cached object, so an override takes effect at the next `knobs()`.

`python -m tomori.knobs` prints the README's settings tables; the test suite
checks that the README lists every knob.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from tomori.service_urls import http_url_or_none

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

# The Python type each kind parses to (the type of its field in `Knobs`).
PYTHON_TYPES: dict[str, type] = {
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "url": str,
    "ip": str,
    "path": Path,
}
# The kinds an empty value gives the default (or None) rather than an error.
_EMPTY_IS_UNSET = frozenset({"str", "url", "ip", "path"})


@dataclass(frozen=True)
class Knob:
    """One env variable: how to parse it, what it defaults to, what it does."""

    name: str
    # "int", "float", "bool", "str", "url" (http(s), with a host), "ip", "path"
    kind: str
    default: Any
    help: str
    group: str
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = False  # an empty or unset value means None...
    fallback: str | None = None  # ...or, if named, that other knob's value

    def expected(self) -> str:
        """Describe the accepted values, for error messages and the README."""
        words = {
            "bool": "one of 1/true/yes/on or 0/false/no/off",
            "str": "a string",
            "url": "an http:// or https:// URL with a host",
            "ip": "an IPv4 or IPv6 address, e.g. 127.0.0.1, 0.0.0.0 or ::",
            "path": "a file path",
        }
        if self.kind in words:
            return words[self.kind]
        noun = "an integer" if self.kind == "int" else "a number"
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            return f"{noun} from {_fmt(low)} to {_fmt(high)}"
        if low is not None:
            return f"{noun} >= {_fmt(low)}"
        return noun

    def field_type(self) -> Any:
        """Return the type of this knob's field in `Knobs`."""
        base = PYTHON_TYPES[self.kind]
        return base | None if self.optional and not self.fallback else base


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _minutes(name: str, default: int, help: str, group: str, **kw: Any) -> Knob:
    return Knob(name, "int", default, help, group, minimum=1, **kw)


def _cap(name: str, default: int, what: str, group: str) -> Knob:
    return Knob(
        name,
        "int",
        default,
        f"Entry cap of the {what}; inserting at the cap evicts expired "
        "entries first, then the oldest-inserted.",
        group,
        minimum=1,
        maximum=10_000_000,
    )


C = "Cache TTLs and caps"
M = "Short-term memory"
S = "Persona sprites"
E = "Memory guard and emergency clear"
X = "Metrics"
O = "OpenRouter catalogs"  # noqa: E741
V = "libvips (native image memory)"
D = "Discord worker and sweepers"
B = "Invalidation delivery"
W = "Database waits and durable writes"
P = "Prometheus and health"

KNOBS: tuple[Knob, ...] = (
    # Cache layers: TTLs (spec "Recommended Env Knobs") and caps (ours).
    _minutes(
        "TOMORI_STATE_CACHE_TTL_MINUTES",
        10,
        "TTL of the Tomori state (personas per server) cache; also the channel prompt and channel LLM caches.",
        C,
    ),
    _cap(
        "TOMORI_STATE_CACHE_MAX_ENTRIES",
        5000,
        "Tomori state cache (one entry per server)",
        C,
    ),
    _minutes(
        "USER_CACHE_TTL_MINUTES",
        30,
        "TTL of the user cache (user row, privacy level, blacklist sub-cache).",
        C,
    ),
    _cap(
        "USER_CACHE_MAX_ENTRIES",
        50000,
        "user cache (one entry per user row and one per server blacklist)",
        C,
    ),
    _minutes(
        "EMOJI_STICKER_CACHE_TTL_MINUTES",
        10,
        "TTL of the emoji/sticker expression cache.",
        C,
    ),
    _cap(
        "EMOJI_STICKER_CACHE_MAX_ENTRIES",
        2000,
        "emoji/sticker cache (one entry per server)",
        C,
    ),
    _minutes(
        "CHANNEL_WHITELIST_CACHE_TTL_MINUTES",
        5,
        "TTL of the channel whitelist decision cache.",
        C,
    ),
    _cap(
        "CHANNEL_WHITELIST_CACHE_MAX_ENTRIES",
        20000,
        "channel whitelist cache (server:channel:parent:roles)",
        C,
    ),
    _cap("CHANNEL_LLM_CACHE_MAX_ENTRIES", 20000, "channel LLM override cache", C),
    _cap("CHANNEL_PROMPT_CACHE_MAX_ENTRIES", 20000, "channel system prompt cache", C),
    _minutes(
        "PERSONAL_SPOTLIGHT_CACHE_TTL_MINUTES",
        5,
        "TTL of the personal spotlight gate and result maps.",
        C,
    ),
    Knob(
        "PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES",
        "int",
        2000,
        "Hard cap on the personal spotlight result map (server:user:channel).",
        C,
        minimum=1,
        maximum=10_000_000,
    ),
    _cap(
        "PERSONAL_SPOTLIGHT_GATE_MAX_ENTRIES",
        5000,
        "personal spotlight gate (one entry per server)",
        C,
    ),
    _minutes(
        "GUILD_MCP_CONFIG_CACHE_TTL_MINUTES",
        10,
        "TTL of the guild MCP server config cache.",
        C,
    ),
    _cap("GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES", 5000, "guild MCP config cache", C),
    _minutes("ST_PRESET_CACHE_TTL_MINUTES", 10, "TTL of the ST preset cache.", C),
    _cap("ST_PRESET_CACHE_MAX_ENTRIES", 5000, "ST preset cache", C),
    _minutes(
        "NOVELAI_SUBSCRIPTION_CACHE_TTL_MINUTES",
        1440,
        "TTL of the NovelAI subscription cache.",
        C,
    ),
    _cap(
        "NOVELAI_SUBSCRIPTION_CACHE_MAX_ENTRIES", 5000, "NovelAI subscription cache", C
    ),
    _cap(
        "LLM_CACHE_MAX_ENTRIES", 5000, "LLM model cache (warmed from the llms table)", C
    ),
    _cap("PRESET_AVATAR_CACHE_MAX_ENTRIES", 500, "preset avatar cache", C),
    Knob(
        "PRESET_AVATAR_MAX_BYTES",
        "int",
        1_048_576,
        "Largest preset avatar PNG the cache accepts, in bytes.",
        C,
        minimum=1024,
        maximum=50_000_000,
    ),
    _minutes(
        "VOICE_TRANSCRIPT_CACHE_TTL_MINUTES",
        120,
        "TTL of the voice transcript cache (message id -> transcript).",
        C,
    ),
    _cap("VOICE_TRANSCRIPT_CACHE_MAX_ENTRIES", 10000, "voice transcript cache", C),
    _minutes(
        "MARKDOWN_TABLE_CACHE_TTL_MINUTES",
        120,
        "TTL of the markdown table render cache.",
        C,
    ),
    _cap("MARKDOWN_TABLE_CACHE_MAX_ENTRIES", 5000, "markdown table cache", C),
    Knob(
        "MARKDOWN_TABLE_BUTTON_TIMEOUT_MS",
        "int",
        7_200_000,
        "Lifetime of the 'Show Markdown' button; must not exceed the markdown table TTL.",
        C,
        minimum=1000,
    ),
    _cap("WEBHOOK_CACHE_MAX_ENTRIES", 20000, "channel and persona webhook caches", C),
    _minutes(
        "WEBHOOK_FAILURE_CACHE_TTL_MINUTES",
        15,
        "How long a channel whose webhook could not be made (missing permission, too many webhooks) is not retried.",
        C,
    ),
    _minutes(
        "WEBHOOK_IDENTITY_CACHE_TTL_MINUTES",
        1440,
        "TTL of the webhook identity cache (webhook id -> impersonated user).",
        C,
    ),
    _cap("WEBHOOK_IDENTITY_CACHE_MAX_ENTRIES", 20000, "webhook identity cache", C),
    # Short-term memory.
    Knob(
        "SHORT_TERM_MEMORY_TTL_HOURS",
        "float",
        12.0,
        "TTL of crude short-term memory entries (no summary).",
        M,
        minimum=0.01,
        maximum=8760,
    ),
    Knob(
        "SHORT_TERM_MEMORY_SUMMARY_TTL_HOURS",
        "float",
        24.0,
        "TTL of short-term memory entries that carry a summary.",
        M,
        minimum=0.01,
        maximum=8760,
    ),
    Knob(
        "SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH",
        "int",
        1500,
        "Summaries are truncated to this many characters.",
        M,
        minimum=1,
        maximum=100_000,
    ),
    Knob(
        "SHORT_TERM_MEMORY_DEFAULT_CRUDE_MESSAGE_COUNT",
        "int",
        6,
        "Messages taken from a crude entry when building context.",
        M,
        minimum=1,
        maximum=1000,
    ),
    Knob(
        "SHORT_TERM_MEMORY_MAX_MESSAGES_PER_CHANNEL",
        "int",
        10,
        "Raw messages kept per short-term memory entry.",
        M,
        minimum=1,
        maximum=1000,
    ),
    Knob(
        "SHORT_TERM_MEMORY_MAX_OTHER_CHANNELS",
        "int",
        3,
        "Other channels of the server whose shared entry is visible from a channel.",
        M,
        minimum=0,
        maximum=100,
    ),
    _cap("SHORT_TERM_MEMORY_CACHE_MAX_ENTRIES", 20000, "short-term memory cache", M),
    Knob(
        "STM_JANITOR_RETENTION_DAYS",
        "int",
        90,
        "The daily janitor deletes durable short-term memory rows older than this.",
        M,
        minimum=1,
        maximum=3650,
    ),
    # Database waits and durable writes (issue 13, parts 3 and 4).
    Knob(
        "DB_CONNECT_TIMEOUT_SECONDS",
        "int",
        5,
        "PostgreSQL connect_timeout: how long opening a connection may take.",
        W,
        minimum=1,
        maximum=600,
    ),
    Knob(
        "DB_STATEMENT_TIMEOUT_MS",
        "int",
        15_000,
        "PostgreSQL statement_timeout of every session (0: none); the server "
        "cancels a longer statement.",
        W,
        minimum=0,
        maximum=86_400_000,
    ),
    Knob(
        "SQLITE_BUSY_TIMEOUT_SECONDS",
        "float",
        20.0,
        "SQLite busy timeout: how long a write waits for another's lock.",
        W,
        minimum=0,
        maximum=600,
    ),
    Knob(
        "DB_CALL_TIMEOUT_SECONDS",
        "float",
        3.0,
        "Deadline of each database call the bot worker makes from its event "
        "loop (queueing included); bounds a turn when the database hangs.",
        W,
        minimum=0.05,
        maximum=600,
    ),
    Knob(
        "DB_BREAKER_OPEN_SECONDS",
        "float",
        2.0,
        "After a call has had no answer for DB_CALL_TIMEOUT_SECONDS, further "
        "calls fail at once for this long, then one probes the database.",
        W,
        minimum=0.01,
        maximum=600,
    ),
    Knob(
        "SHORT_TERM_MEMORY_PENDING_WRITES_MAX",
        "int",
        100_000,
        "Cap on short-term memory's durable writes kept (one per key, newest "
        "wins) while the database refuses them; past it the oldest is dropped "
        "and logged.",
        W,
        minimum=1,
        maximum=10_000_000,
    ),
    Knob(
        "SHORT_TERM_MEMORY_RETRY_MAX_SECONDS",
        "float",
        5.0,
        "A failed durable batch is retried after 0.25 s, doubling up to this.",
        W,
        minimum=0.01,
        maximum=600,
    ),
    Knob(
        "WORKER_SHUTDOWN_TIMEOUT_SECONDS",
        "float",
        15.0,
        "SIGTERM: the worker retries its durable writes until this long after "
        "the signal, then exits (1 and a count if some were not written).",
        W,
        minimum=1,
        maximum=600,
    ),
    # Persona sprites.
    Knob(
        "PERSONA_SPRITE_CACHE_TTL_MINUTES",
        "int",
        None,
        "TTL of the persona sprite cache; unset falls back to TOMORI_STATE_CACHE_TTL_MINUTES.",
        S,
        minimum=1,
        optional=True,
        fallback="TOMORI_STATE_CACHE_TTL_MINUTES",
    ),
    _cap(
        "PERSONA_SPRITE_CACHE_MAX_ENTRIES",
        5000,
        "persona sprite cache (one entry per persona)",
        S,
    ),
    Knob(
        "PERSONA_SPRITE_MAX_PER_PERSONA",
        "int",
        50,
        "Most sprites a persona may have.",
        S,
        minimum=1,
        maximum=1000,
    ),
    Knob(
        "PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH",
        "int",
        300,
        "Longest sprite instructions accepted (the database maximum is 1000).",
        S,
        minimum=1,
        maximum=1000,
    ),
    Knob(
        "PERSONA_SPRITE_PROMPT_MAX_COUNT",
        "int",
        20,
        "Most sprites listed in a prompt.",
        S,
        minimum=1,
        maximum=1000,
    ),
    _minutes(
        "PERSONA_SPRITE_MESSAGE_CACHE_TTL_MINUTES",
        120,
        "TTL of the persona sprite message cache (bounds memory only; entries are immutable).",
        S,
    ),
    _cap(
        "PERSONA_SPRITE_MESSAGE_CACHE_MAX_ENTRIES",
        50000,
        "persona sprite message cache",
        S,
    ),
    Knob(
        "PERSONA_SPRITE_MESSAGE_RETENTION_DAYS",
        "int",
        30,
        "persona_sprite_messages rows older than this are pruned on the write path.",
        S,
        minimum=1,
        maximum=3650,
    ),
    # Memory guard and emergency clear.
    Knob(
        "CONTAINER_MEMORY_LIMIT_MB",
        "int",
        None,
        "Memory limit the guard measures RSS against; unset uses the cgroup limit, else total memory.",
        E,
        minimum=16,
        optional=True,
    ),
    Knob(
        "MEMORY_WARNING_THRESHOLD",
        "float",
        0.75,
        "Fraction of the limit at which the guard enters 'warning'.",
        E,
        minimum=0.01,
        maximum=1,
    ),
    Knob(
        "MEMORY_CRITICAL_THRESHOLD",
        "float",
        0.85,
        "Fraction of the limit at which the guard enters 'critical' and runs the emergency clear.",
        E,
        minimum=0.01,
        maximum=1,
    ),
    Knob(
        "MEMORY_MONITOR_INTERVAL_MS",
        "int",
        30_000,
        "How often the memory guard samples RSS.",
        E,
        minimum=100,
    ),
    Knob(
        "EMERGENCY_CACHE_CLEAR_ENABLED",
        "bool",
        True,
        "Whether entering critical clears the recoverable caches (false: a logged no-op).",
        E,
    ),
    Knob(
        "EMERGENCY_CACHE_CLEAR_INCLUDE_STM",
        "bool",
        False,
        "Last resort: also clear live short-term memory (conversational state).",
        E,
    ),
    Knob(
        "EMERGENCY_CACHE_CLEAR_DISCORD_VOLATILE",
        "bool",
        True,
        "Also clear discord.py's messages, bot members, presences and voice states.",
        E,
    ),
    Knob(
        "EMERGENCY_COOLDOWN_MS",
        "int",
        60_000,
        "How long the guard holds 'critical' after an emergency before re-evaluating.",
        E,
        minimum=0,
    ),
    Knob(
        "HEAP_MMAP_THRESHOLD_KB",
        "int",
        128,
        "The worker fixes glibc's mmap threshold here at start: a block this "
        "large or larger (a big dict or list table) gets a mapping of its own, "
        "returned to the kernel when freed, instead of leaving a hole in the "
        "heap. 0 keeps glibc's sliding threshold (it rises to each large block "
        "freed, up to 32 MiB). No effect off glibc.",
        E,
        minimum=0,
        maximum=32 * 1024,
    ),
    # Metrics.
    Knob(
        "METRICS_LOG_FILE",
        "path",
        None,
        "File the JSON metric lines (cache_sizes, host_memory, memory guard) are appended to instead of the console; empty: the console, for a log shipper. `make run` sets var/log/metrics.jsonl.",
        X,
        optional=True,
    ),
    Knob(
        "CACHE_METRICS_INTERVAL_MS",
        "int",
        300_000,
        "Interval of the cache_sizes and host_memory samples.",
        X,
        minimum=1000,
    ),
    Knob(
        "METRIC_SAMPLE_RETENTION_DAYS",
        "int",
        30,
        "metric_samples rows older than this are pruned on the write path.",
        X,
        minimum=1,
        maximum=3650,
    ),
    Knob(
        "METRIC_SAMPLE_PRUNE_INTERVAL_MS",
        "int",
        21_600_000,
        "Pruning runs at most this often, after a successful insert.",
        X,
        minimum=1000,
    ),
    Knob(
        "WORKER_SNAPSHOT_INTERVAL_SECONDS",
        "float",
        5.0,
        "How often a bot worker publishes its live cache snapshot for the admin.",
        X,
        minimum=0.1,
        maximum=3600,
    ),
    Knob(
        "CACHE_COMMAND_TIMEOUT_SECONDS",
        "float",
        3.0,
        "How long the admin and the management commands wait for workers to answer an operator command.",
        X,
        minimum=0.1,
        maximum=600,
    ),
    # OpenRouter catalogs.
    Knob(
        "OPENROUTER_BASE_URL",
        "url",
        "https://openrouter.ai/api/v1",
        "Base URL of the OpenRouter API.",
        O,
    ),
    Knob(
        "OPENROUTER_API_KEY",
        "str",
        "",
        "API key sent to OpenRouter (optional for the catalog endpoints).",
        O,
    ),
    Knob(
        "OPENROUTER_CATALOG_TTL_MS",
        "int",
        21_600_000,
        "A catalog older than this is refreshed by the background refresher.",
        O,
        minimum=1000,
    ),
    Knob(
        "OPENROUTER_CATALOG_REFRESH_MIN_INTERVAL_MS",
        "int",
        60_000,
        "Refresh attempts per catalog are rate-limited to one per this interval (fresh=True bypasses).",
        O,
        minimum=0,
    ),
    Knob(
        "OPENROUTER_HTTP_TIMEOUT_SECONDS",
        "float",
        15.0,
        "Timeout of one catalog fetch.",
        O,
        minimum=0.1,
        maximum=600,
    ),
    # libvips.
    Knob(
        "SHARP_CONCURRENCY",
        "int",
        1,
        "libvips worker threads per pipeline (each holds its own decoded bitmaps).",
        V,
        minimum=1,
        maximum=256,
    ),
    Knob(
        "SHARP_CACHE_MEMORY_MB",
        "int",
        16,
        "libvips operation cache memory limit.",
        V,
        minimum=0,
        maximum=65536,
    ),
    Knob(
        "SHARP_CACHE_ITEMS",
        "int",
        50,
        "libvips operation cache item limit (0 disables the cache).",
        V,
        minimum=0,
        maximum=1_000_000,
    ),
    Knob(
        "SHARP_CACHE_FILES",
        "int",
        0,
        "libvips operation cache open-file limit.",
        V,
        minimum=0,
        maximum=100_000,
    ),
    # Discord worker.
    Knob(
        "DISCORD_TOKEN",
        "str",
        "",
        "Bot token; unset makes `runbot` use the simulated Discord.",
        D,
    ),
    Knob(
        "DISCORD_MAX_MESSAGES",
        "int",
        1000,
        "discord.py's message cache size (max_messages).",
        D,
        minimum=0,
        maximum=1_000_000,
    ),
    Knob(
        "PIPELINE_WORKERS",
        "int",
        512,
        "Turns resolved at once; later messages wait in one queue (a slot "
        "each, not a suspended turn).",
        D,
        minimum=1,
        maximum=10_000,
    ),
    Knob(
        "PIPELINE_MAX_WAITING",
        "int",
        5000,
        "Messages that may wait for a turn worker; past it the oldest is shed "
        "(counted, logged, kept in the history window).",
        D,
        minimum=1,
        maximum=1_000_000,
    ),
    Knob(
        "DISCORD_MESSAGE_SWEEP_INTERVAL_SECONDS",
        "int",
        3600,
        "How often cached discord.py messages are swept.",
        D,
        minimum=1,
    ),
    Knob(
        "DISCORD_MESSAGE_LIFETIME_SECONDS",
        "int",
        1800,
        "Cached messages older than this are swept.",
        D,
        minimum=1,
    ),
    Knob(
        "DISCORD_MEMBER_SWEEP_INTERVAL_SECONDS",
        "int",
        3600,
        "How often cached members are swept (own member and voice members kept).",
        D,
        minimum=1,
    ),
    Knob(
        "DISCORD_USER_SWEEP_INTERVAL_SECONDS",
        "int",
        3600,
        "How often bot members are swept (frees their Users).",
        D,
        minimum=1,
    ),
    Knob(
        "DISCORD_PRESENCE_SWEEP_INTERVAL_SECONDS",
        "int",
        3600,
        "How often offline presences with no activity are cleared.",
        D,
        minimum=1,
    ),
    # Shard lock (one client per shard).
    Knob(
        "SHARD_LOCK_TTL_SECONDS",
        "int",
        30,
        "Lifetime of a worker's Redis shard lock. It is renewed every third of "
        "it (every second or so while Redis fails); a worker that cannot renew "
        "for a whole TTL stops, and a worker that takes a lock connects only "
        "half a TTL later. Every worker of a deployment must use the same value.",
        D,
        minimum=3,
        maximum=3600,
    ),
    # Invalidation delivery (the outbox): the staleness bound under faults.
    Knob(
        "INVALIDATION_STALENESS_BOUND_SECONDS",
        "float",
        2.0,
        "Longest a committed change may be served stale by a bot worker when Redis or the writer fails (Redis cut, paused or restarted; writer killed after its commit). Workers read the invalidation outbox every quarter of it.",
        B,
        minimum=0.2,
        maximum=60,
    ),
    Knob(
        "CONSISTENCY_CHECKS_PER_SECOND",
        "float",
        2.0,
        "How many cached entries per second the consistency watcher re-reads from the database to compare (0 turns it off). Its whole database load.",
        B,
        minimum=0,
        maximum=100,
    ),
    Knob(
        "OUTBOX_RETENTION_MINUTES",
        "int",
        60,
        "Invalidation outbox rows older than this are pruned; a worker that could not read the outbox for longer clears every invalidatable cache.",
        B,
        minimum=5,
        maximum=10080,
    ),
    # Prometheus and health (observability in the operator's own tools).
    Knob(
        "METRICS_PORT",
        "int",
        None,
        "Port of a bot worker's HTTP endpoint: Prometheus metrics on /metrics, probes on /healthz and /readyz. Unset: no endpoint. 0 picks a free port (logged). One port per runbot process: give each shard process on a host its own.",
        P,
        minimum=0,
        maximum=65535,
        optional=True,
    ),
    Knob(
        "METRICS_ADDRESS",
        "ip",
        "127.0.0.1",
        "Address the worker's metrics endpoint binds; 0.0.0.0 (or ::) lets a scraper on another host in.",
        P,
    ),
    Knob(
        "METRICS_REFRESH_SECONDS",
        "float",
        15.0,
        "How often a worker recomputes, on its event loop, the figures nothing may walk from another thread: each cache's sampled bytes estimate (with or without METRICS_PORT) and, for the metrics endpoint, discord.py cache counts.",
        P,
        minimum=1,
        maximum=3600,
    ),
    Knob(
        "METRICS_SIZE_SAMPLE_ENTRIES",
        "int",
        32,
        "Entries sampled per cache map for each cache's bytes estimate (a deep sys.getsizeof scaled to the entry count), shown by cache_stats, the dashboard, the cache_sizes rows and tomori_cache_estimated_bytes; 0 turns the estimate off.",
        P,
        minimum=0,
        maximum=10000,
    ),
    Knob(
        "HEALTH_MIN_LIVE_WORKERS",
        "int",
        1,
        "Live bot workers the admin's readiness URL /health/ready/ requires; 0 lists them without requiring any.",
        P,
        minimum=0,
        maximum=10000,
    ),
    Knob(
        "HEALTH_CHECK_TIMEOUT_SECONDS",
        "float",
        2.0,
        "How long /health/ready/ waits for the database and for Redis before it reports them down.",
        P,
        minimum=0.1,
        maximum=60,
    ),
)

KNOBS_BY_NAME: dict[str, Knob] = {knob.name: knob for knob in KNOBS}

# Parsed by the same rules, but outside the table: settings.py reads it first
# (it decides whether SECRET_KEY is required) and stops at once on a bad value.
DEBUG_KNOB = Knob(
    "DEBUG",
    "bool",
    False,
    "Development mode. Allows the built-in dev SECRET_KEY and missing crypto keys.",
    "Process and services",
)


def parse_knob(knob: Knob, raw: str | None) -> tuple[Any, str | None]:
    """Return (value, error) for one raw env string; error names the variable."""
    if raw is None or (
        raw.strip() == "" and (knob.optional or knob.kind in _EMPTY_IS_UNSET)
    ):
        return (None if knob.optional else knob.default), None
    text = raw.strip()
    value = _convert(knob, text)
    if value is None or not _in_range(knob, value):
        return (
            knob.default,
            f"{knob.name}={raw!r} is invalid: expected {knob.expected()}.",
        )
    return value, None


def _convert(knob: Knob, text: str) -> Any:
    converters: dict[str, Callable[[str], Any]] = {
        "int": _to_int,
        "float": _to_float,
        "bool": _to_bool,
        "str": str,
        "url": http_url_or_none,
        "ip": _to_ip,
        "path": Path,
    }
    return converters[knob.kind](text)


def _to_int(text: str) -> int | None:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        return None


def _to_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _to_ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _to_bool(text: str) -> bool | None:
    word = text.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


def _in_range(knob: Knob, value: Any) -> bool:
    if knob.kind not in ("int", "float"):
        return True
    if knob.minimum is not None and value < knob.minimum:
        return False
    return knob.maximum is None or value <= knob.maximum


def read_knobs(env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Parse every knob from env; return the values and the list of errors."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    for knob in KNOBS:
        value, error = parse_knob(knob, env.get(knob.name))
        values[knob.name] = value
        if error:
            errors.append(error)
    for knob in KNOBS:
        if knob.fallback and values[knob.name] is None:
            values[knob.name] = values[knob.fallback]
    errors.extend(cross_field_errors(values))
    return values, errors


def cross_field_errors(values: Mapping[str, Any]) -> list[str]:
    """Return errors for combinations of valid values that contradict each other."""
    errors = []
    warning = values["MEMORY_WARNING_THRESHOLD"]
    critical = values["MEMORY_CRITICAL_THRESHOLD"]
    if warning >= critical:
        errors.append(
            f"MEMORY_WARNING_THRESHOLD={warning} must be below "
            f"MEMORY_CRITICAL_THRESHOLD={critical}."
        )
    table_ttl_ms = values["MARKDOWN_TABLE_CACHE_TTL_MINUTES"] * 60_000
    if values["MARKDOWN_TABLE_BUTTON_TIMEOUT_MS"] > table_ttl_ms:
        errors.append(
            f"MARKDOWN_TABLE_BUTTON_TIMEOUT_MS={values['MARKDOWN_TABLE_BUTTON_TIMEOUT_MS']} "
            f"must not exceed MARKDOWN_TABLE_CACHE_TTL_MINUTES "
            f"({values['MARKDOWN_TABLE_CACHE_TTL_MINUTES']} min = {table_ttl_ms} ms), "
            "or the button outlives its entry."
        )
    return errors


@dataclass(frozen=True, slots=True, kw_only=True)
class Knobs:
    """Every knob's value, typed; one field per row of `KNOBS`, in its order.

    Built by `load_knobs` (from the environment) and read through `knobs()`.
    A knob with a fallback (PERSONA_SPRITE_CACHE_TTL_MINUTES) holds the
    resolved value.
    """

    # Cache TTLs and caps
    TOMORI_STATE_CACHE_TTL_MINUTES: int
    TOMORI_STATE_CACHE_MAX_ENTRIES: int
    USER_CACHE_TTL_MINUTES: int
    USER_CACHE_MAX_ENTRIES: int
    EMOJI_STICKER_CACHE_TTL_MINUTES: int
    EMOJI_STICKER_CACHE_MAX_ENTRIES: int
    CHANNEL_WHITELIST_CACHE_TTL_MINUTES: int
    CHANNEL_WHITELIST_CACHE_MAX_ENTRIES: int
    CHANNEL_LLM_CACHE_MAX_ENTRIES: int
    CHANNEL_PROMPT_CACHE_MAX_ENTRIES: int
    PERSONAL_SPOTLIGHT_CACHE_TTL_MINUTES: int
    PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES: int
    PERSONAL_SPOTLIGHT_GATE_MAX_ENTRIES: int
    GUILD_MCP_CONFIG_CACHE_TTL_MINUTES: int
    GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES: int
    ST_PRESET_CACHE_TTL_MINUTES: int
    ST_PRESET_CACHE_MAX_ENTRIES: int
    NOVELAI_SUBSCRIPTION_CACHE_TTL_MINUTES: int
    NOVELAI_SUBSCRIPTION_CACHE_MAX_ENTRIES: int
    LLM_CACHE_MAX_ENTRIES: int
    PRESET_AVATAR_CACHE_MAX_ENTRIES: int
    PRESET_AVATAR_MAX_BYTES: int
    VOICE_TRANSCRIPT_CACHE_TTL_MINUTES: int
    VOICE_TRANSCRIPT_CACHE_MAX_ENTRIES: int
    MARKDOWN_TABLE_CACHE_TTL_MINUTES: int
    MARKDOWN_TABLE_CACHE_MAX_ENTRIES: int
    MARKDOWN_TABLE_BUTTON_TIMEOUT_MS: int
    WEBHOOK_CACHE_MAX_ENTRIES: int
    WEBHOOK_FAILURE_CACHE_TTL_MINUTES: int
    WEBHOOK_IDENTITY_CACHE_TTL_MINUTES: int
    WEBHOOK_IDENTITY_CACHE_MAX_ENTRIES: int
    # Short-term memory
    SHORT_TERM_MEMORY_TTL_HOURS: float
    SHORT_TERM_MEMORY_SUMMARY_TTL_HOURS: float
    SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH: int
    SHORT_TERM_MEMORY_DEFAULT_CRUDE_MESSAGE_COUNT: int
    SHORT_TERM_MEMORY_MAX_MESSAGES_PER_CHANNEL: int
    SHORT_TERM_MEMORY_MAX_OTHER_CHANNELS: int
    SHORT_TERM_MEMORY_CACHE_MAX_ENTRIES: int
    STM_JANITOR_RETENTION_DAYS: int
    # Database waits and durable writes
    DB_CONNECT_TIMEOUT_SECONDS: int
    DB_STATEMENT_TIMEOUT_MS: int
    SQLITE_BUSY_TIMEOUT_SECONDS: float
    DB_CALL_TIMEOUT_SECONDS: float
    DB_BREAKER_OPEN_SECONDS: float
    SHORT_TERM_MEMORY_PENDING_WRITES_MAX: int
    SHORT_TERM_MEMORY_RETRY_MAX_SECONDS: float
    WORKER_SHUTDOWN_TIMEOUT_SECONDS: float
    # Persona sprites
    PERSONA_SPRITE_CACHE_TTL_MINUTES: int
    PERSONA_SPRITE_CACHE_MAX_ENTRIES: int
    PERSONA_SPRITE_MAX_PER_PERSONA: int
    PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH: int
    PERSONA_SPRITE_PROMPT_MAX_COUNT: int
    PERSONA_SPRITE_MESSAGE_CACHE_TTL_MINUTES: int
    PERSONA_SPRITE_MESSAGE_CACHE_MAX_ENTRIES: int
    PERSONA_SPRITE_MESSAGE_RETENTION_DAYS: int
    # Memory guard and emergency clear
    CONTAINER_MEMORY_LIMIT_MB: int | None
    MEMORY_WARNING_THRESHOLD: float
    MEMORY_CRITICAL_THRESHOLD: float
    MEMORY_MONITOR_INTERVAL_MS: int
    EMERGENCY_CACHE_CLEAR_ENABLED: bool
    EMERGENCY_CACHE_CLEAR_INCLUDE_STM: bool
    EMERGENCY_CACHE_CLEAR_DISCORD_VOLATILE: bool
    EMERGENCY_COOLDOWN_MS: int
    HEAP_MMAP_THRESHOLD_KB: int
    # Metrics
    METRICS_LOG_FILE: Path | None
    CACHE_METRICS_INTERVAL_MS: int
    METRIC_SAMPLE_RETENTION_DAYS: int
    METRIC_SAMPLE_PRUNE_INTERVAL_MS: int
    WORKER_SNAPSHOT_INTERVAL_SECONDS: float
    CACHE_COMMAND_TIMEOUT_SECONDS: float
    # OpenRouter catalogs
    OPENROUTER_BASE_URL: str
    OPENROUTER_API_KEY: str
    OPENROUTER_CATALOG_TTL_MS: int
    OPENROUTER_CATALOG_REFRESH_MIN_INTERVAL_MS: int
    OPENROUTER_HTTP_TIMEOUT_SECONDS: float
    # libvips (native image memory)
    SHARP_CONCURRENCY: int
    SHARP_CACHE_MEMORY_MB: int
    SHARP_CACHE_ITEMS: int
    SHARP_CACHE_FILES: int
    # Discord worker and sweepers
    DISCORD_TOKEN: str
    DISCORD_MAX_MESSAGES: int
    PIPELINE_WORKERS: int
    PIPELINE_MAX_WAITING: int
    DISCORD_MESSAGE_SWEEP_INTERVAL_SECONDS: int
    DISCORD_MESSAGE_LIFETIME_SECONDS: int
    DISCORD_MEMBER_SWEEP_INTERVAL_SECONDS: int
    DISCORD_USER_SWEEP_INTERVAL_SECONDS: int
    DISCORD_PRESENCE_SWEEP_INTERVAL_SECONDS: int
    SHARD_LOCK_TTL_SECONDS: int
    # Invalidation delivery
    INVALIDATION_STALENESS_BOUND_SECONDS: float
    CONSISTENCY_CHECKS_PER_SECOND: float
    OUTBOX_RETENTION_MINUTES: int
    # Prometheus and health
    METRICS_PORT: int | None
    METRICS_ADDRESS: str
    METRICS_REFRESH_SECONDS: float
    METRICS_SIZE_SAMPLE_ENTRIES: int
    HEALTH_MIN_LIVE_WORKERS: int
    HEALTH_CHECK_TIMEOUT_SECONDS: float


def check_against_table(cls: type, table: tuple[Knob, ...]) -> None:
    """Raise TypeError unless `cls` has one field per knob, in order, of its type."""
    hints = get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    if names != [knob.name for knob in table]:
        missing = sorted({k.name for k in table} - set(names))
        extra = sorted(set(names) - {k.name for k in table})
        raise TypeError(
            f"{cls.__name__} drifted from the knob table: missing {missing}, "
            f"extra {extra} (or out of order)"
        )
    for knob in table:
        if hints[knob.name] != knob.field_type():
            raise TypeError(
                f"{cls.__name__}.{knob.name} is {hints[knob.name]}, but its kind "
                f"{knob.kind!r} parses to {knob.field_type()}"
            )


check_against_table(Knobs, KNOBS)


def load_knobs(env: Mapping[str, str]) -> tuple[Knobs, list[str]]:
    """Return the knobs parsed from `env` and the errors (invalid values are defaults)."""
    values, errors = read_knobs(env)
    return Knobs(**values), errors


# What an override may be given as, where the field's own type is not all.
_ALSO_ACCEPTED: dict[str, tuple[type, ...]] = {
    "float": (int, float),
    "path": (str, Path),
}


def coerce_override(knob: Knob, value: Any) -> Any:
    """Return a Python value given for `knob` as its field's type, or raise.

    For a Django setting named like a knob (tests' overrides): the type is
    enforced, the operator's range is not (a test may want a tiny TTL).
    """
    if value is None and knob.optional and not knob.fallback:
        return None
    python_type = PYTHON_TYPES[knob.kind]
    accepted = _ALSO_ACCEPTED.get(knob.kind, (python_type,))
    is_bool = isinstance(value, bool)
    if isinstance(value, accepted) and is_bool == (knob.kind == "bool"):
        return python_type(value)
    raise ImproperlyConfigured(
        f"{knob.name}={value!r} is invalid: expected {knob.expected()}."
    )


_current: Knobs | None = None


def knobs() -> Knobs:
    """Return the current knobs (see the module docstring)."""
    global _current
    current = _current
    if current is None:
        current = _current = _from_settings()
    return current


def _from_settings() -> Knobs:
    from django.conf import settings

    base = getattr(settings, "TOMORI_KNOBS", None)
    if not isinstance(base, Knobs):
        raise ImproperlyConfigured(
            "TOMORI_KNOBS is not a tomori.knobs.Knobs: the settings module must "
            "set TOMORI_KNOBS, KNOB_ERRORS = load_knobs(os.environ)."
        )
    overrides = {
        knob.name: coerce_override(knob, getattr(settings, knob.name))
        for knob in KNOBS
        if hasattr(settings, knob.name)
    }
    return replace(base, **overrides) if overrides else base


def _drop_on_change(*, setting: str, **kwargs: Any) -> None:
    """Forget the current knobs when a test changes TOMORI_KNOBS or a knob."""
    global _current
    if setting == "TOMORI_KNOBS" or setting in KNOBS_BY_NAME:
        _current = None


setting_changed.connect(_drop_on_change, dispatch_uid="tomori.knobs.drop_on_change")


def markdown_table() -> str:
    """Render the settings table the README carries (`python -m tomori.knobs`)."""
    lines: list[str] = []
    group = None
    for knob in KNOBS:
        if knob.group != group:
            group = knob.group
            lines += [
                "",
                f"#### {group}",
                "",
                "| variable | default | accepted | effect |",
            ]
            lines.append("|---|---|---|---|")
        default = "unset" if knob.default in (None, "") else f"`{knob.default}`"
        if isinstance(knob.default, bool):
            default = f"`{str(knob.default).lower()}`"
        lines.append(f"| `{knob.name}` | {default} | {knob.expected()} | {knob.help} |")
    return "\n".join(lines).strip() + "\n"


if __name__ == "__main__":
    print(markdown_table())
