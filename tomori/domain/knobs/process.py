"""The knobs of the processes themselves: database waits, memory, libvips, Discord, OpenRouter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tomori.domain.knobs.declare import knob


@dataclass(frozen=True, kw_only=True)
class DatabaseKnobs:
    """How long database calls may wait, and the durable writes held meanwhile."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Database waits and durable writes"

    DB_CONNECT_TIMEOUT_SECONDS: int = knob(
        5,
        "PostgreSQL connect_timeout: how long opening a connection may take.",
        minimum=1,
        maximum=600,
    )
    DB_STATEMENT_TIMEOUT_MS: int = knob(
        15_000,
        "PostgreSQL statement_timeout of every session (0: none); the server cancels "
        "a longer statement.",
        minimum=0,
        maximum=86_400_000,
    )
    SQLITE_BUSY_TIMEOUT_SECONDS: float = knob(
        20.0,
        "SQLite busy timeout: how long a write waits for another's lock.",
        minimum=0,
        maximum=600,
    )
    DB_CALL_TIMEOUT_SECONDS: float = knob(
        3.0,
        "Deadline of each database call the bot worker makes from its event loop "
        "(queueing included); bounds a turn when the database hangs.",
        minimum=0.05,
        maximum=600,
    )
    DB_BREAKER_OPEN_SECONDS: float = knob(
        2.0,
        "After a call has had no answer for DB_CALL_TIMEOUT_SECONDS, further calls "
        "fail at once for this long, then one probes the database.",
        minimum=0.01,
        maximum=600,
    )
    SHORT_TERM_MEMORY_PENDING_WRITES_MAX: int = knob(
        100_000,
        "Cap on short-term memory's durable writes kept (one per key, newest wins) "
        "while the database refuses them; past it the oldest is dropped and logged.",
        minimum=1,
        maximum=10_000_000,
    )
    SHORT_TERM_MEMORY_RETRY_MAX_SECONDS: float = knob(
        5.0,
        "A failed durable batch is retried after 0.25 s, doubling up to this.",
        minimum=0.01,
        maximum=600,
    )
    WORKER_WARM_TIMEOUT_SECONDS: float = knob(
        15.0,
        "At start, before logging in, the worker warms its guilds' per-server cache "
        "entries for at most this long (0: not at all); past it, or on a database "
        "error, it starts with what is warm.",
        minimum=0,
        maximum=600,
    )
    WORKER_REFRESH_AHEAD: bool = knob(
        True,
        "Keep the warmed per-server cache entries warm: every half of a layer's TTL "
        "the worker reloads the entries it still holds in bulk, before they expire "
        "(false: they expire and reload one miss at a time).",
    )
    WORKER_SHUTDOWN_TIMEOUT_SECONDS: float = knob(
        15.0,
        "SIGTERM: the worker lets its running turns finish (half of this less 1 s, "
        "at most 5 s, then cancels them) and retries their durable writes until "
        "this long after the signal, then exits (1 and a count if some were not "
        "written).",
        minimum=1,
        maximum=600,
    )


@dataclass(frozen=True, kw_only=True)
class MemoryGuardKnobs:
    """The RSS guard, what its emergency clear drops, and the C heap."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Memory guard and emergency clear"

    CONTAINER_MEMORY_LIMIT_MB: int | None = knob(
        None,
        "Memory limit the guard measures RSS against; unset uses the cgroup limit, "
        "else total memory.",
        minimum=16,
    )
    MEMORY_WARNING_THRESHOLD: float = knob(
        0.75,
        "Fraction of the limit at which the guard enters 'warning'.",
        minimum=0.01,
        maximum=1,
    )
    MEMORY_CRITICAL_THRESHOLD: float = knob(
        0.85,
        "Fraction of the limit at which the guard enters 'critical' and runs the "
        "emergency clear.",
        minimum=0.01,
        maximum=1,
    )
    MEMORY_MONITOR_INTERVAL_MS: int = knob(
        30_000,
        "How often the memory guard samples RSS.",
        minimum=100,
    )
    EMERGENCY_CACHE_CLEAR_ENABLED: bool = knob(
        True,
        "Whether entering critical clears the recoverable caches (false: a logged "
        "no-op).",
    )
    EMERGENCY_CACHE_CLEAR_INCLUDE_STM: bool = knob(
        False, "Last resort: also clear live short-term memory (conversational state)."
    )
    EMERGENCY_CACHE_CLEAR_DISCORD_VOLATILE: bool = knob(
        True,
        "Also clear discord.py's messages, bot members, presences and voice states.",
    )
    EMERGENCY_COOLDOWN_MS: int = knob(
        60_000,
        "How long the guard holds 'critical' after an emergency before re-evaluating.",
        minimum=0,
    )
    HEAP_MMAP_THRESHOLD_KB: int = knob(
        512,
        "The worker fixes glibc's mmap threshold here at start: a block this large "
        "or larger (a big dict or list table) gets a mapping of its own, returned to "
        "the kernel when freed, instead of leaving a hole in the heap. 0 keeps "
        "glibc's sliding threshold (it rises to each large block freed, up to 32 "
        "MiB). Keep it above 256: asyncio reads every socket into a 256 KiB buffer, "
        "which a threshold of 256 or less maps, shrinks and unmaps on every read "
        "(three system calls and a page fault a gateway frame). No effect off glibc.",
        minimum=0,
        maximum=32_768,
    )


@dataclass(frozen=True, kw_only=True)
class OpenRouterKnobs:
    """The OpenRouter API and how often its catalogs are refreshed."""

    __slots__ = ()
    GROUP: ClassVar[str] = "OpenRouter catalogs"

    OPENROUTER_BASE_URL: str = knob(
        "https://openrouter.ai/api/v1",
        "Base URL of the OpenRouter API.",
        kind="url",
    )
    OPENROUTER_API_KEY: str = knob(
        "", "API key sent to OpenRouter (optional for the catalog endpoints)."
    )
    OPENROUTER_CATALOG_TTL_MS: int = knob(
        21_600_000,
        "A catalog older than this is refreshed by the background refresher.",
        minimum=1000,
    )
    OPENROUTER_CATALOG_REFRESH_MIN_INTERVAL_MS: int = knob(
        60_000,
        "Refresh attempts per catalog are rate-limited to one per this interval "
        "(fresh=True bypasses).",
        minimum=0,
    )
    OPENROUTER_HTTP_TIMEOUT_SECONDS: float = knob(
        15.0,
        "Timeout of one catalog fetch.",
        minimum=0.1,
        maximum=600,
    )


@dataclass(frozen=True, kw_only=True)
class LibvipsKnobs:
    """libvips' threads and operation cache (memory outside Python's heap)."""

    __slots__ = ()
    GROUP: ClassVar[str] = "libvips (native image memory)"

    SHARP_CONCURRENCY: int = knob(
        1,
        "libvips worker threads per pipeline (each holds its own decoded bitmaps).",
        minimum=1,
        maximum=256,
    )
    SHARP_CACHE_MEMORY_MB: int = knob(
        16,
        "libvips operation cache memory limit.",
        minimum=0,
        maximum=65_536,
    )
    SHARP_CACHE_ITEMS: int = knob(
        50,
        "libvips operation cache item limit (0 disables the cache).",
        minimum=0,
        maximum=1_000_000,
    )
    SHARP_CACHE_FILES: int = knob(
        0,
        "libvips operation cache open-file limit.",
        minimum=0,
        maximum=100_000,
    )


@dataclass(frozen=True, kw_only=True)
class DiscordKnobs:
    """discord.py's caches and sweepers, the turn pipeline and the shard lock."""

    __slots__ = ()
    GROUP: ClassVar[str] = "Discord worker and sweepers"

    DISCORD_TOKEN: str = knob(
        "", "Bot token; unset makes `runbot` use the simulated Discord."
    )
    DISCORD_MAX_MESSAGES: int = knob(
        1000,
        "discord.py's message cache size (max_messages).",
        minimum=0,
        maximum=1_000_000,
    )
    PIPELINE_WORKERS: int = knob(
        512,
        "Turns resolved at once; later messages wait in one queue (a slot each, not "
        "a suspended turn).",
        minimum=1,
        maximum=10_000,
    )
    PIPELINE_MAX_WAITING: int = knob(
        5000,
        "Messages that may wait for a turn worker; past it the oldest is shed "
        "(counted, logged, kept in the history window).",
        minimum=1,
        maximum=1_000_000,
    )
    DISCORD_MESSAGE_SWEEP_INTERVAL_SECONDS: int = knob(
        3600,
        "How often cached discord.py messages are swept.",
        minimum=1,
    )
    DISCORD_MESSAGE_LIFETIME_SECONDS: int = knob(
        1800,
        "Cached messages older than this are swept.",
        minimum=1,
    )
    DISCORD_MEMBER_SWEEP_INTERVAL_SECONDS: int = knob(
        3600,
        "How often cached members are swept (own member and voice members kept).",
        minimum=1,
    )
    DISCORD_USER_SWEEP_INTERVAL_SECONDS: int = knob(
        3600,
        "How often bot members are swept (frees their Users).",
        minimum=1,
    )
    DISCORD_PRESENCE_SWEEP_INTERVAL_SECONDS: int = knob(
        3600,
        "How often offline presences with no activity are cleared.",
        minimum=1,
    )
    SHARD_LOCK_TTL_SECONDS: int = knob(
        30,
        "Lifetime of a worker's Redis shard lock. It is renewed every third of it "
        "(every second or so while Redis fails); a worker that cannot renew for a "
        "whole TTL stops, and a worker that takes a lock connects only half a TTL "
        "later. Every worker of a deployment must use the same value.",
        minimum=3,
        maximum=3600,
    )
