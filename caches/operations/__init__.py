"""Cache operations: the one service behind the cache dashboard and management commands.

Operator side (admin views, `manage.py invalidate_cache` ...): build a command
(validated against this process's registry: an unknown name raises
`UnknownCacheError`, a key of the wrong shape `BadKeyError`), publish it to
every worker with `send_command` (over `caches.bus`), and read the replies
(`OperationOutcome`: one `WorkerReply` per worker, or none = no worker
answered before the timeout).

Worker side: the bot worker builds a `WorkerContext(worker_id, shard_ids,
client or client_getter, catalogs, loop)`, registers
`make_command_handler(ctx, after=republish)` (which runs
`execute_command(cmd, context=ctx)`) as its bus command handler, and publishes
`build_worker_snapshot(...)` every few seconds, and after each command,
through `caches.live.publish_snapshot`.

Command (a JSON-ready dict; `id` is a fresh uuid4 hex, `issued_at` Unix time)::

    {"id": str, "op": "clear_cache", "cache": str, "issued_by": str, "issued_at": float}
    {"id", "op": "invalidate_key", "cache": str, "key": str (as typed), "issued_by", "issued_at"}
    {"id", "op": "clear_all", "issued_by", "issued_at"}           # clearable caches
    {"id", "op": "emergency_clear", "include_short_term_memory": bool, "issued_by", "issued_at"}
    {"id", "op": "refresh_catalogs", "fresh": bool, "issued_by", "issued_at"}

Reply (one per worker)::

    {"command_id": str, "op": str, "worker_id": str, "shard_ids": list[int] | None,
     "ok": bool, "error": str | None, "removed": int, "duration_ms": float,
     "details": {...}}        # the bus adds "origin"; a handler that raised
                              # becomes {"ok": False, "error": ..., "worker_id"}

`details` per op: clear_cache {"cache", "removed"}; invalidate_key {"cache",
"key", "removed"}; clear_all {"cleared": {cache: removed}} over the clearable
caches (policy "clear", `is_clearable`: the same set as each cache's clear
button and the emergency clear); emergency_clear
`EmergencyClearResult.as_dict()` (total_cleared, cleared, discord_cleared,
preserved, memory before/after ...); refresh_catalogs {"results": {catalog:
refreshed?}, "sizes": {catalog: models}, "fresh": bool}. A worker without the
named cache replies ok=False, error "unknown cache ... on this worker".

Live worker snapshot (`caches.live.publish_snapshot(worker_id, snapshot)`)::

    {
      "worker_id": str,
      "shard_ids": list[int] | None,
      "published_at": float,            # Unix time (publish_snapshot sets it)
      "started_at": float,              # Unix time the worker started
      "caches": {name: {                # registry.stats()
          "size": int, "cap": int | None, "ttl": float | None (seconds),
          "hits", "misses", "loads", "load_failures", "evictions",
          "expirations", "invalidations": int,
          "last_invalidation": float | None (Unix time),
          "policy": "clear" | "preserve" | "expired_only",
          "description": str, "invalidatable": bool, ...}},
      "discord": {"discord_guilds", "discord_users", "discord_members",
                  "discord_presences", "discord_channels", "discord_threads",
                  "discord_emojis", "discord_stickers", "discord_messages",
                  "discord_voice_states": int},   # {} without a client
      "memory": {"rss_mb": float, "limit_mb": float | None, "percent": float | None,
                 "limit_source": "configured" | "cgroup_v1" | "cgroup_v2" |
                                 "host_total" | "guard" | "unknown",
                 "state": "safe" | "warning" | "critical" | None,
                 "python_allocated_blocks": int,
                 "vips_tracked_mem_mb", "vips_tracked_mem_highwater_mb", ...},
      "bus": {"mode": "redis" | "local", "connected": bool,
              "lag_p50_ms": float | None, "lag_p99_ms": float | None,
              "flushes": int, "commands_run": int (operator commands this
              worker ran, over Redis or in-process), ...},
      "catalogs": {name: CatalogRefresher.status()},   # {} without catalogs
    }
"""

from caches.operations.commands import (
    CLEAR_ALL,
    CLEAR_CACHE,
    DEFAULT_TIMEOUT,
    EMERGENCY_CLEAR,
    INVALIDATE_KEY,
    OPS,
    REFRESH_CATALOGS,
    BadKeyError,
    OperationError,
    OperationOutcome,
    UnknownCacheError,
    WorkerReply,
    clear_all_command,
    clear_cache_command,
    describe_command,
    emergency_clear_command,
    ensure_layers_loaded,
    invalidate_key_command,
    refresh_catalogs_command,
    registered_entry,
    send_command,
)
from caches.operations.faults import DATABASE_ERRORS, database_fault
from caches.operations.plan import EmergencyPlan, emergency_plan
from caches.operations.snapshot import build_worker_snapshot
from caches.operations.stats import (
    LayerRow,
    LiveWorkers,
    WorkerView,
    format_duration,
    layer_row,
    live_worker_views,
    read_live_workers,
    worker_view,
)
from caches.operations.worker import (
    CommandFailed,
    WorkerContext,
    execute_command,
    execute_command_async,
    is_clearable,
    make_command_handler,
)

__all__ = [
    "CLEAR_ALL",
    "CLEAR_CACHE",
    "DATABASE_ERRORS",
    "DEFAULT_TIMEOUT",
    "EMERGENCY_CLEAR",
    "INVALIDATE_KEY",
    "OPS",
    "REFRESH_CATALOGS",
    "BadKeyError",
    "CommandFailed",
    "EmergencyPlan",
    "LayerRow",
    "LiveWorkers",
    "OperationError",
    "OperationOutcome",
    "UnknownCacheError",
    "WorkerContext",
    "WorkerReply",
    "WorkerView",
    "build_worker_snapshot",
    "clear_all_command",
    "clear_cache_command",
    "database_fault",
    "describe_command",
    "emergency_clear_command",
    "emergency_plan",
    "ensure_layers_loaded",
    "execute_command",
    "execute_command_async",
    "format_duration",
    "invalidate_key_command",
    "is_clearable",
    "make_command_handler",
    "layer_row",
    "live_worker_views",
    "read_live_workers",
    "refresh_catalogs_command",
    "registered_entry",
    "send_command",
    "worker_view",
]
