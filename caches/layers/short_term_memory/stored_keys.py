"""Which short-term memory keys may have a row in the table: misses for the others ask nothing.

Every turn reads two keys (the user's, the channel's), and most keys a busy
bot meets it has never stored: a new speaker, a new channel. Each such miss
used to ask the table, to learn there is nothing (0.74 queries a message on
the production scenario). This process writes its shard's keys and no other
process does (a channel's guild belongs to one shard; the shard lock keeps
one worker per shard), so what the table can hold for them is known here:
the rows it held when this process built its filter, plus every key the
process has stored since.

That set is kept as a Bloom filter (rbloom: ~1.2 MB per million keys at a 1%
false-positive rate; a key set of that size would be ~100 MB): a key it has
never seen is certainly not stored, and its miss is answered "nothing stored"
at once; a key it may have seen (stored, or one in a hundred that only looks
so) reads the table as before. Until the first build, and while a build
fails, every miss reads the table.

A build reads the keys of the rows written within the entries' longest
lifetime (older rows are never hydrated), in pages, inside the durable
writer's read fence: a batch stored while the pages are read, the batch in
flight and the queued writes are added too, and so is every key stored
during the build. A filter that has taken more keys than it was sized for is
rebuilt (rows that expired drop out then).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from rbloom import Bloom

logger = logging.getLogger(__name__)

#: The false-positive rate the filter is sized for: the share of never-stored
#: keys that still read the table.
FALSE_POSITIVE_RATE = 0.01
#: The smallest capacity (keys) a filter is built for (~120 KB).
MIN_CAPACITY = 100_000
#: A filter is sized for this many times the keys it is built from, so it
#: takes that many new keys again before a rebuild.
HEADROOM = 2
#: Keys read per page of a build (one database call each, within its deadline).
PAGE_KEYS = 20_000
#: Read one page: (keys after this one, at most this many) -> keys, in order.
LoadPage = Callable[[str, int], Awaitable[list[str]]]


class StoredKeys:
    """A Bloom filter of the keys that may be stored; None until built."""

    def __init__(self) -> None:
        self._filter: Bloom | None = None
        self._capacity = 0
        self._during: list[str] | None = None  # keys noted while a build runs
        self.answered = 0  # misses answered "nothing stored" without the table
        self.builds = 0
        self.built_from = 0  # rows the last build read

    @property
    def ready(self) -> bool:
        """Tell whether a built filter answers misses."""
        return self._filter is not None

    @property
    def building(self) -> bool:
        """Tell whether a build runs now."""
        return self._during is not None

    def needs_build(self) -> bool:
        """Tell whether there is no filter yet, or it took more keys than its size."""
        bloom = self._filter
        return bloom is None or bloom.approx_items > self._capacity

    def note(self, key: str) -> None:
        """Note a key this process stores (its write is queued now)."""
        bloom = self._filter
        if bloom is not None:
            bloom.add(key)
        during = self._during
        if during is not None:
            during.append(key)

    def note_all(self, keys: Iterable[str]) -> None:
        """Note every key of one store."""
        for key in keys:
            self.note(key)

    def absent(self, key: str) -> bool:
        """Tell whether `key` is certainly not stored (counted: a miss answered)."""
        bloom = self._filter
        if bloom is None or key in bloom:
            return False
        self.answered += 1
        return True

    async def build(
        self,
        count: Callable[[], Awaitable[int]],
        load_page: LoadPage,
        queued: Callable[[], Iterable[str]],
    ) -> bool:
        """Build a filter from the table's keys; return False if one is building already.

        `count` gives the rows to size it for, `load_page` reads them in key
        order, `queued` returns the keys written but maybe not in the rows
        read (called inside the caller's read fence, after the last page).
        Database errors propagate; the filter in use stays.
        """
        if self._during is not None:
            return False
        self._during = []
        try:
            rows = await count()
            capacity = max(MIN_CAPACITY, HEADROOM * rows)
            fresh = Bloom(capacity, FALSE_POSITIVE_RATE)
            after = ""
            while page := await load_page(after, PAGE_KEYS):
                fresh.update(page)
                after = page[-1]
            fresh.update(queued())
            fresh.update(self._during)
            self._filter, self._capacity = fresh, capacity
            self.builds += 1
            self.built_from = rows
            return True
        finally:
            self._during = None

    def stats(self) -> dict[str, object]:
        """Return the filter's figures (for the layer's stats)."""
        bloom = self._filter
        return {
            "stored_keys_filter": "built" if bloom is not None else "not built",
            "stored_keys_capacity": self._capacity,
            "stored_keys_bytes": (bloom.size_in_bits // 8) if bloom is not None else 0,
            "misses_answered_unstored": self.answered,
        }
