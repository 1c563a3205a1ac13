"""The transactional invalidation outbox: no invalidation is lost once its write committed.

Every recorded write also stores its events in `caches_invalidation_outbox`,
in the write's own transaction (`store.append`). Redis pub/sub stays the fast
path; every bot worker also runs an `OutboxFollower` that reads the rows
committed after the last one it applied, on a short interval and at once
after a reconnect or a sequence gap. Invalidation is idempotent, so applying
a row twice is harmless; rows already applied through the fast path are
skipped anyway. The staleness bound under any single fault of Redis or of a
writer is `INVALIDATION_STALENESS_BOUND_SECONDS`.
"""

from caches.outbox.follower import OutboxFollower
from caches.outbox.store import append, newest_id, prune, rows_after
from caches.outbox.tracker import CatchUpTracker, OutboxRow

__all__ = [
    "CatchUpTracker",
    "OutboxFollower",
    "OutboxRow",
    "append",
    "newest_id",
    "prune",
    "rows_after",
]
