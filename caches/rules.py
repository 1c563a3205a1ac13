"""The one mapping from a model change to the cache invalidation events it causes.

Each rule names a model (by label), the layers it invalidates (their
declarations), the attribute names its event function reads (`reads`) and
those whose change matters (`fields`; None means every column). A change emits
the events of both the old and the new row, so a row whose key moved (a
persona moved to another server) invalidates both keys. Events are made only
through the layers' declared operations (`Layer.op`), applied by
`registry.apply(cache, op, *args)`. This module imports the layer modules,
hence the models: import it once the app registry is ready.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from caches.layers import (
    channel_llm,
    channel_prompt,
    channel_whitelist,
    emoji_sticker,
    guild_mcp_config,
    llm,
    novelai_subscription,
    persona_sprite,
    personal_spotlight,
    preset_avatar,
    st_preset,
    tomori_state,
    user,
    webhook,
)
from caches.layers.declaration import EventOp, Layer
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
    """How changes of one model's rows invalidate one or more cache layers."""

    model: str
    layers: tuple[Layer, ...]
    reads: tuple[str, ...]
    events: EventsFn
    fields: tuple[str, ...] | None = None
    m2m: tuple[str, ...] = ()

    @property
    def caches(self) -> tuple[str, ...]:
        """Return the names of the layers this rule invalidates."""
        return tuple(layer.name for layer in self.layers)

    def relevant(self, attnames: Iterable[str]) -> frozenset[str]:
        """Return the attribute names whose change makes this rule fire."""
        fields = attnames if self.fields is None else self.fields
        return frozenset(fields) | frozenset(self.reads)


def event(op: EventOp, *args: Any) -> Event:
    """Return the event `op(*args)`, or its layer's `all` when a lookup failed."""
    if any(arg is None for arg in args):
        # The row a key needs is gone (raw delete): dropping the cache is safe.
        return Event(op.cache, "all")
    return op(*args)


# Every event is made through its layer's declared operations, bound here at
# import: a renamed or missing operation fails the import, not a later save.
STATE_KEY = tomori_state.LAYER.op("key")
USER_KEY = user.LAYER.op("key")
USER_BLACKLIST_SERVER = user.LAYER.op("blacklist_server")
EXPRESSIONS_KEY = emoji_sticker.LAYER.op("key")
WHITELIST_SERVER = channel_whitelist.LAYER.op("server")
WHITELIST_CHANNEL = channel_whitelist.LAYER.op("channel")
CHANNEL_LLM_CHANNEL = channel_llm.LAYER.op("channel")
CHANNEL_PROMPT_KEY = channel_prompt.LAYER.op("key")
SPOTLIGHT = personal_spotlight.LAYER.op("spotlight")
ST_PRESET_KEY = st_preset.LAYER.op("key")
SPRITES_KEY = persona_sprite.LAYER.op("key")
WEBHOOK_CHANNEL = webhook.LAYER.op("channel")
WEBHOOK_PERSONA = webhook.LAYER.op("persona")
PRESET_AVATAR_KEY = preset_avatar.LAYER.op("key")
LLM_KEY = llm.LAYER.op("key")
LLM_RELOAD = llm.LAYER.op("reload")


def _tomori_state(row: Row, look: Lookup) -> list[Event]:
    return [event(STATE_KEY, look.server_disc_id(row["server_id"]))]


def _whitelist_server(row: Row, look: Lookup) -> list[Event]:
    return [event(WHITELIST_SERVER, look.server_disc_id(row["server_id"]))]


def _by_server_id(layer: Layer) -> EventsFn:
    op = layer.op("key")
    return lambda row, _look: [event(op, row["server_id"])]


def _server_rules() -> list[Rule]:
    server = "tomori.Server"
    return [
        Rule(
            server,
            (tomori_state.LAYER,),
            ("server_disc_id",),
            lambda row, _l: [event(STATE_KEY, row["server_disc_id"])],
        ),
        Rule(
            server,
            (emoji_sticker.LAYER,),
            ("id",),
            lambda row, _l: [event(EXPRESSIONS_KEY, row["id"])],
            fields=("emoji_usage_enabled", "sticker_usage_enabled"),
        ),
        Rule(
            server,
            (channel_whitelist.LAYER,),
            ("server_disc_id",),
            lambda row, _l: [event(WHITELIST_SERVER, row["server_disc_id"])],
            fields=("channel_whitelist_enabled",),
        ),
        Rule(
            server,
            (user.LAYER,),
            ("server_disc_id",),
            lambda row, _l: [event(USER_BLACKLIST_SERVER, row["server_disc_id"])],
            fields=(),
        ),
    ]


def _persona_rules() -> list[Rule]:
    persona = "tomori.Persona"
    return [
        Rule(
            "tomori.ServerModelConfig",
            (tomori_state.LAYER,),
            ("server_id",),
            _tomori_state,
        ),
        Rule(persona, (tomori_state.LAYER,), ("server_id",), _tomori_state),
        Rule(
            persona,
            (webhook.LAYER,),
            ("id",),
            lambda row, _l: [event(WEBHOOK_PERSONA, row["id"])],
            fields=("avatar_url", "name"),
        ),
        # Whitelist entries carry persona restrictions; a deleted persona's
        # m2m rows vanish without a signal, so the persona row answers for them.
        Rule(
            persona,
            (channel_whitelist.LAYER,),
            ("server_id",),
            _whitelist_server,
            fields=("name",),
        ),
        Rule(
            "tomori.Llm",
            (llm.LAYER,),
            ("id",),
            lambda row, _l: [event(LLM_KEY, row["id"]), LLM_RELOAD()],
        ),
    ]


def _user_rules() -> list[Rule]:
    def blacklist(row: Row, look: Lookup) -> list[Event]:
        # A server's blacklist is one entry: the server alone names it (no
        # user lookup, which a cascade that deleted the user would defeat).
        return [event(USER_BLACKLIST_SERVER, look.server_disc_id(row["server_id"]))]

    return [
        Rule(
            "tomori.User",
            (user.LAYER,),
            ("user_disc_id",),
            lambda row, _l: [event(USER_KEY, row["user_disc_id"])],
        ),
        Rule(
            "tomori.UserBlacklist", (user.LAYER,), ("server_id", "user_id"), blacklist
        ),
    ]


def _channel_rules() -> list[Rule]:
    def whitelist_channel(row: Row, look: Lookup) -> list[Event]:
        server = look.server_disc_id(row["server_id"])
        return [event(WHITELIST_CHANNEL, server, row["channel_disc_id"])]

    key = ("server_id", "channel_disc_id")
    return [
        Rule(
            "tomori.WhitelistedChannel",
            (channel_whitelist.LAYER,),
            key,
            whitelist_channel,
            m2m=("personas",),
        ),
        Rule(
            "tomori.WhitelistedRole",
            (channel_whitelist.LAYER,),
            ("server_id",),
            _whitelist_server,
        ),
        Rule(
            "tomori.ChannelLlmOverride",
            (channel_llm.LAYER,),
            key,
            lambda row, _l: [
                event(CHANNEL_LLM_CHANNEL, row["server_id"], row["channel_disc_id"])
            ],
        ),
        Rule(
            "tomori.ChannelPromptOverride",
            (channel_prompt.LAYER,),
            key,
            lambda row, _l: [
                CHANNEL_PROMPT_KEY((row["server_id"], row["channel_disc_id"]))
            ],
        ),
    ]


def _guild_rules() -> list[Rule]:
    def spotlight(row: Row, _look: Lookup) -> list[Event]:
        return [SPOTLIGHT(row["server_id"], row["user_id"], row["channel_disc_id"])]

    def st_node(row: Row, look: Lookup) -> list[Event]:
        return [event(ST_PRESET_KEY, look.preset_server_id(row["preset_id"]))]

    sid = ("server_id",)
    return [
        Rule(
            "tomori.ServerExpression",
            (emoji_sticker.LAYER,),
            sid,
            _by_server_id(emoji_sticker.LAYER),
        ),
        Rule(
            "tomori.ServerExpressionSync",
            (emoji_sticker.LAYER,),
            sid,
            _by_server_id(emoji_sticker.LAYER),
        ),
        Rule(
            "tomori.GuildMcpServerConfig",
            (guild_mcp_config.LAYER,),
            sid,
            _by_server_id(guild_mcp_config.LAYER),
            # display_metadata and tool_names_updated_at are not served from the cache.
            fields=("tool_names", "enabled", "url", "name"),
        ),
        Rule(
            "tomori.NovelAiSubscription",
            (novelai_subscription.LAYER,),
            sid,
            _by_server_id(novelai_subscription.LAYER),
            fields=("tier", "context_limit"),
        ),
        Rule(
            "tomori.PersonalSpotlight",
            (personal_spotlight.LAYER,),
            ("server_id", "user_id", "channel_disc_id"),
            spotlight,
        ),
        Rule(
            "tomori.StPreset", (st_preset.LAYER,), sid, _by_server_id(st_preset.LAYER)
        ),
        Rule("tomori.StPresetNode", (st_preset.LAYER,), ("preset_id",), st_node),
    ]


def _asset_rules() -> list[Rule]:
    return [
        Rule(
            "tomori.PersonaSprite",
            (persona_sprite.LAYER,),
            ("persona_id",),
            lambda row, _l: [event(SPRITES_KEY, row["persona_id"])],
        ),
        Rule(
            "tomori.ManagedWebhook",
            (webhook.LAYER,),
            ("channel_disc_id",),
            lambda row, _l: [event(WEBHOOK_CHANNEL, row["channel_disc_id"])],
        ),
        Rule(
            "tomori.PresetPersona",
            (preset_avatar.LAYER,),
            ("id",),
            lambda row, _l: [event(PRESET_AVATAR_KEY, row["id"])],
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
