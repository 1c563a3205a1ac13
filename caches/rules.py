"""The mapping from a model change to the cache invalidation events it causes, derived.

Nothing here is written by hand: each layer declares the tables that feed it
(`Layer.feeds`, see `caches.layers._feeds`), and every feed becomes one rule
naming its model (by label), the layer, the columns its operation's
arguments read (`reads`) and those whose change matters (`fields`; None
means every column). A change emits the events of both the old and the new
row, so a row whose key moved (a persona moved to another server)
invalidates both keys. Events are made only through the layers' declared
operations (`Layer.op`), applied by `registry.apply(cache, op, *args)`. This
module imports the layer modules, hence the models: import it once the app
registry is ready.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache

from caches.layers import declared_layers
from caches.layers._feeds import Feed, Lookup, Row, Via
from caches.layers.declaration import Layer
from caches.registry import Event

__all__ = ["Event", "Lookup", "Row", "Rule", "RULES", "LOOKUP_MODELS"]

EventsFn = Callable[[Row, Lookup], Iterable[Event]]


@dataclass(frozen=True)
class Rule:
    """How changes of one model's rows invalidate one cache layer (one `Feed`)."""

    model: str
    layers: tuple[Layer, ...]
    reads: tuple[str, ...]
    events: EventsFn
    fields: tuple[str, ...] | None = None
    m2m: tuple[str, ...] = ()
    #: Arguments read through another table (what a batch looks up at once).
    vias: tuple[Via, ...] = ()

    @property
    def caches(self) -> tuple[str, ...]:
        """Return the names of the layers this rule invalidates."""
        return tuple(layer.name for layer in self.layers)

    def relevant(self, attnames: Iterable[str]) -> frozenset[str]:
        """Return the attribute names whose change makes this rule fire."""
        fields = attnames if self.fields is None else self.fields
        return frozenset(fields) | frozenset(self.reads)


def feed_rule(layer: Layer, feed: Feed) -> Rule:
    """Return the rule a layer's feed declares."""
    op = layer.feed_op(feed)

    def events(row: Row, lookup: Lookup) -> list[Event]:
        args = feed.key_args(row, lookup)
        # The row a key needs is gone (raw delete): dropping the cache is safe.
        return [Event(layer.name, "all") if args is None else op(*args)]

    return Rule(
        feed.model, (layer,), feed.reads, events, feed.fields, feed.m2m, feed.vias
    )


def derive_rules(layers: Iterable[Layer]) -> tuple[Rule, ...]:
    """Return the rule of every feed the layers declare, layer by layer."""
    return tuple(feed_rule(layer, feed) for layer in layers for feed in layer.feeds)


RULES: tuple[Rule, ...] = derive_rules(declared_layers().values())

# Models whose rows a feed reads through (`Via`): a change to one drops the
# lookup memo.
LOOKUP_MODELS = frozenset(
    via.model
    for layer in declared_layers().values()
    for feed in layer.feeds
    for via in feed.vias
)


@cache
def _rules_by_label() -> dict[str, tuple[Rule, ...]]:
    index: dict[str, list[Rule]] = {}
    for rule in RULES:
        index.setdefault(rule.model.lower(), []).append(rule)
    return {label: tuple(rules) for label, rules in index.items()}


def rules_for(label: str) -> tuple[Rule, ...]:
    """Return the rules of the model labelled `label` ("tomori.Persona")."""
    return _rules_by_label().get(label.lower(), ())


def labels() -> list[str]:
    """Return the label of every model that has a rule."""
    return sorted({rule.model for rule in RULES})


def row_events(rule: Rule, row: Row, lookup: Lookup, *, pk: str = "id") -> list[Event]:
    """Return the events of one row under `rule` (`all` when its key is unknown)."""
    if pk in rule.reads and row.get(pk) is None:
        # bulk_create(ignore_conflicts=True) leaves pks unset on some backends.
        return [layer.op("all")() for layer in rule.layers]
    return list(rule.events(row, lookup))


def change_events(
    rules: Sequence[Rule],
    old: Row | None,
    new: Row | None,
    lookup: Lookup,
    *,
    columns: Iterable[str],
    pk: str = "id",
) -> list[Event]:
    """Return the events of a row going from `old` to `new` (None: absent)."""
    events: list[Event] = []
    for rule in rules:
        if (
            old is not None
            and new is not None
            and not _changed(rule, old, new, columns)
        ):
            continue
        for row in (old, new):
            if row is not None:
                events.extend(row_events(rule, row, lookup, pk=pk))
    return unique(events)


def _changed(rule: Rule, old: Row, new: Row, columns: Iterable[str]) -> bool:
    return any(old.get(name) != new.get(name) for name in rule.relevant(columns))


def unique(events: Iterable[Event]) -> list[Event]:
    """Return `events` without repeats, in first-seen order."""
    return list(dict.fromkeys(events))
