"""The one mapping from a model change to the cache invalidation events it causes.

Each rule names a model (by label, so this module imports no models and is safe
to import before the app registry is ready), the attribute names its event
function reads (`reads`) and those whose change matters (`fields`; None means
every column). A change emits the events of both the old and the new row, so a
row whose key moved (a persona moved to another server) invalidates both keys.
Event vocabulary: /tmp/contracts.md, applied by `registry.apply(cache, op, *args)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from caches.registry import Event

Row = Mapping[str, Any]


class Lookup(Protocol):
    """Resolves the ids a cache key needs from the ids a row holds (None: row gone)."""

    def server_disc_id(self, server_id: int) -> int | None: ...
    def user_disc_id(self, user_id: int) -> int | None: ...
    def preset_server_id(self, preset_id: int) -> int | None: ...


EventsFn = Callable[[Row, Lookup], Iterable[Event]]


@dataclass(frozen=True)
class Rule:
    """How changes of one model's rows invalidate one or more caches."""

    model: str
    caches: tuple[str, ...]
    reads: tuple[str, ...]
    events: EventsFn
    fields: tuple[str, ...] | None = None
    m2m: tuple[str, ...] = ()

    def relevant(self, attnames: Iterable[str]) -> frozenset[str]:
        """Return the attribute names whose change makes this rule fire."""
        fields = attnames if self.fields is None else self.fields
        return frozenset(fields) | frozenset(self.reads)


def event(cache_name: str, op: str, *args: Any) -> Event:
    """Return the event `op(*args)` on `cache_name`, or `all` when a lookup failed."""
    if any(arg is None for arg in args):
        # The row a key needs is gone (raw delete): dropping the cache is safe.
        return Event(cache_name, "all")
    return Event(cache_name, op, args)


def _tomori_state(row: Row, look: Lookup) -> list[Event]:
    return [event("tomori_state", "key", look.server_disc_id(row["server_id"]))]


def _whitelist_server(row: Row, look: Lookup) -> list[Event]:
    return [event("channel_whitelist", "server", look.server_disc_id(row["server_id"]))]


def _by_server_id(cache_name: str) -> EventsFn:
    return lambda row, _look: [event(cache_name, "key", row["server_id"])]


def _server_rules() -> list[Rule]:
    server = "tomori.Server"
    return [
        Rule(
            server,
            ("tomori_state",),
            ("server_disc_id",),
            lambda row, _l: [event("tomori_state", "key", row["server_disc_id"])],
        ),
        Rule(
            server,
            ("emoji_sticker",),
            ("id",),
            lambda row, _l: [event("emoji_sticker", "key", row["id"])],
            fields=("emoji_usage_enabled", "sticker_usage_enabled"),
        ),
        Rule(
            server,
            ("channel_whitelist",),
            ("server_disc_id",),
            lambda row, _l: [
                event("channel_whitelist", "server", row["server_disc_id"])
            ],
            fields=("channel_whitelist_enabled",),
        ),
        Rule(
            server,
            ("user",),
            ("server_disc_id",),
            lambda row, _l: [event("user", "blacklist_server", row["server_disc_id"])],
            fields=(),
        ),
    ]


def _persona_rules() -> list[Rule]:
    persona = "tomori.Persona"
    return [
        Rule(
            "tomori.ServerModelConfig", ("tomori_state",), ("server_id",), _tomori_state
        ),
        Rule(persona, ("tomori_state",), ("server_id",), _tomori_state),
        Rule(
            persona,
            ("webhook",),
            ("id",),
            lambda row, _l: [event("webhook", "persona", row["id"])],
            fields=("avatar_url", "name"),
        ),
        # Whitelist entries carry persona restrictions; a deleted persona's
        # m2m rows vanish without a signal, so the persona row answers for them.
        Rule(
            persona,
            ("channel_whitelist",),
            ("server_id",),
            _whitelist_server,
            fields=("name",),
        ),
        Rule(
            "tomori.Llm",
            ("llm",),
            ("id",),
            lambda row, _l: [event("llm", "key", row["id"]), Event("llm", "reload")],
        ),
    ]


def _user_rules() -> list[Rule]:
    def blacklist(row: Row, look: Lookup) -> list[Event]:
        server = look.server_disc_id(row["server_id"])
        user = look.user_disc_id(row["user_id"])
        return [event("user", "blacklist", server, user)]

    return [
        Rule(
            "tomori.User",
            ("user",),
            ("user_disc_id",),
            lambda row, _l: [event("user", "key", row["user_disc_id"])],
        ),
        Rule("tomori.UserBlacklist", ("user",), ("server_id", "user_id"), blacklist),
    ]


def _channel_rules() -> list[Rule]:
    def whitelist_channel(row: Row, look: Lookup) -> list[Event]:
        server = look.server_disc_id(row["server_id"])
        return [event("channel_whitelist", "channel", server, row["channel_disc_id"])]

    key = ("server_id", "channel_disc_id")
    return [
        Rule(
            "tomori.WhitelistedChannel",
            ("channel_whitelist",),
            key,
            whitelist_channel,
            m2m=("personas",),
        ),
        Rule(
            "tomori.WhitelistedRole",
            ("channel_whitelist",),
            ("server_id",),
            _whitelist_server,
        ),
        Rule(
            "tomori.ChannelLlmOverride",
            ("channel_llm",),
            key,
            lambda row, _l: [
                event(
                    "channel_llm", "channel", row["server_id"], row["channel_disc_id"]
                )
            ],
        ),
        Rule(
            "tomori.ChannelPromptOverride",
            ("channel_prompt",),
            key,
            lambda row, _l: [
                Event(
                    "channel_prompt",
                    "key",
                    ((row["server_id"], row["channel_disc_id"]),),
                )
            ],
        ),
    ]


def _guild_rules() -> list[Rule]:
    def spotlight(row: Row, _look: Lookup) -> list[Event]:
        args = (row["server_id"], row["user_id"], row["channel_disc_id"])
        return [Event("personal_spotlight", "spotlight", args)]

    def st_node(row: Row, look: Lookup) -> list[Event]:
        return [event("st_preset", "key", look.preset_server_id(row["preset_id"]))]

    sid = ("server_id",)
    return [
        Rule(
            "tomori.ServerExpression",
            ("emoji_sticker",),
            sid,
            _by_server_id("emoji_sticker"),
        ),
        Rule(
            "tomori.ServerExpressionSync",
            ("emoji_sticker",),
            sid,
            _by_server_id("emoji_sticker"),
        ),
        Rule(
            "tomori.GuildMcpServerConfig",
            ("guild_mcp_config",),
            sid,
            _by_server_id("guild_mcp_config"),
            # display_metadata and tool_names_updated_at are not served from the cache.
            fields=("tool_names", "enabled", "url", "name"),
        ),
        Rule(
            "tomori.NovelAiSubscription",
            ("novelai_subscription",),
            sid,
            _by_server_id("novelai_subscription"),
            fields=("tier", "context_limit"),
        ),
        Rule(
            "tomori.PersonalSpotlight",
            ("personal_spotlight",),
            ("server_id", "user_id", "channel_disc_id"),
            spotlight,
        ),
        Rule("tomori.StPreset", ("st_preset",), sid, _by_server_id("st_preset")),
        Rule("tomori.StPresetNode", ("st_preset",), ("preset_id",), st_node),
    ]


def _asset_rules() -> list[Rule]:
    return [
        Rule(
            "tomori.PersonaSprite",
            ("persona_sprite",),
            ("persona_id",),
            lambda row, _l: [event("persona_sprite", "key", row["persona_id"])],
        ),
        Rule(
            "tomori.ManagedWebhook",
            ("webhook",),
            ("channel_disc_id",),
            lambda row, _l: [event("webhook", "channel", row["channel_disc_id"])],
        ),
        Rule(
            "tomori.PresetPersona",
            ("preset_avatar",),
            ("id",),
            lambda row, _l: [event("preset_avatar", "key", row["id"])],
        ),
    ]


RULES: tuple[Rule, ...] = (
    *_server_rules(),
    *_persona_rules(),
    *_user_rules(),
    *_channel_rules(),
    *_guild_rules(),
    *_asset_rules(),
)

# Models whose rows `Lookup` reads: a change to one drops the lookup memo.
LOOKUP_MODELS = frozenset({"tomori.Server", "tomori.User", "tomori.StPreset"})


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
        return [Event(name, "all") for name in rule.caches]
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
