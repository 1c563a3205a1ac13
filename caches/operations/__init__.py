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

Commands, replies and the live worker snapshot are the frozen dataclasses of
`caches.messages` (`ClearCache`, `InvalidateKey`, `ClearAll`,
`EmergencyClear`, `RefreshCatalogs`; `WorkerReply`; `WorkerSnapshot`), which
also hold their JSON form: read the shapes there. A worker without the named
cache replies ok=False, error "unknown cache ... on this worker". The same
snapshot feeds the dashboard and the metrics logger's `cache_sizes` row
(`metrics.snapshot.cache_sizes_row`).

One worker alone: `on_worker_command(command, worker_id)` wraps a command in
`OnWorker` (after checking that the worker is live: `UnknownWorkerError`);
the other workers decline it, and the sender stops waiting at its one reply.
The fleet's views (`caches.operations.fleet`) sum the workers' rows.
"""

from caches.operations.commands import (
    CLEAR_ALL,
    CLEAR_CACHE,
    DEFAULT_TIMEOUT,
    EMERGENCY_CLEAR,
    INVALIDATE_KEY,
    ON_WORKER,
    OPS,
    REFRESH_CATALOGS,
    BadKeyError,
    OperationError,
    UnknownCacheError,
    UnknownWorkerError,
    clear_all_command,
    clear_cache_command,
    emergency_clear_command,
    ensure_layers_loaded,
    invalidate_key_command,
    on_worker_command,
    refresh_catalogs_command,
    registered_entry,
    send_command,
)
from caches.operations.faults import DATABASE_ERRORS, database_fault
from caches.operations.fleet import (
    FleetCache,
    Problem,
    WorkerRow,
    fleet_cache,
    fleet_caches,
    missing_shards,
    worker_rows,
)
from caches.operations.outcome import (
    OperationOutcome,
    WorkerReply,
    describe_command,
    describe_reply,
)
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
    is_addressed_to,
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
    "ON_WORKER",
    "OPS",
    "REFRESH_CATALOGS",
    "BadKeyError",
    "CommandFailed",
    "EmergencyPlan",
    "FleetCache",
    "LayerRow",
    "LiveWorkers",
    "OperationError",
    "OperationOutcome",
    "Problem",
    "UnknownCacheError",
    "UnknownWorkerError",
    "WorkerContext",
    "WorkerReply",
    "WorkerRow",
    "WorkerView",
    "build_worker_snapshot",
    "clear_all_command",
    "clear_cache_command",
    "database_fault",
    "describe_command",
    "describe_reply",
    "emergency_clear_command",
    "emergency_plan",
    "ensure_layers_loaded",
    "execute_command",
    "execute_command_async",
    "fleet_cache",
    "fleet_caches",
    "format_duration",
    "invalidate_key_command",
    "is_addressed_to",
    "is_clearable",
    "make_command_handler",
    "layer_row",
    "live_worker_views",
    "missing_shards",
    "on_worker_command",
    "read_live_workers",
    "refresh_catalogs_command",
    "registered_entry",
    "send_command",
    "worker_rows",
    "worker_view",
]
