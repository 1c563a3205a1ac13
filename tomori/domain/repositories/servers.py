"""Servers, their model configuration and personas: reads for the caches, and writes."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Mod

from tomori.domain.models import Persona, Server, ServerModelConfig
from tomori.domain.repositories._fields import build, save_changes

SERVER_FIELDS = (
    "name",
    "tool_use_enabled",
    "emoji_usage_enabled",
    "sticker_usage_enabled",
    "channel_whitelist_enabled",
)
PERSONA_FIELDS = (
    "name",
    "is_main",
    "position",
    "llm_id",
    "system_prompt",
    "avatar_url",
    "tools_enabled",
)


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """A server row as the caches see it."""

    id: int
    server_disc_id: int
    name: str
    tool_use_enabled: bool
    emoji_usage_enabled: bool
    sticker_usage_enabled: bool
    channel_whitelist_enabled: bool


@dataclass(frozen=True, slots=True)
class ModelConfigRecord:
    """A server's model configuration; the API key itself is never cached."""

    server_id: int
    llm_id: int | None
    configured: bool
    temperature: float


@dataclass(frozen=True, slots=True)
class PersonaRecord:
    """A persona row as the caches see it."""

    id: int
    server_id: int
    name: str
    is_main: bool
    position: int
    llm_id: int | None
    system_prompt: str
    avatar_url: str
    tools_enabled: bool


@dataclass(frozen=True, slots=True)
class TomoriStateRows:
    """Everything the Tomori state cache needs about one server."""

    server: ServerRecord
    model_config: ModelConfigRecord | None
    personas: tuple[PersonaRecord, ...]  # main first, then alters by position


def server_record(server: Server) -> ServerRecord:
    """Return the immutable snapshot of a server row."""
    return ServerRecord(
        id=server.pk,
        server_disc_id=server.server_disc_id,
        **{name: getattr(server, name) for name in SERVER_FIELDS},
    )


def persona_record(persona: Persona) -> PersonaRecord:
    """Return the immutable snapshot of a persona row."""
    return PersonaRecord(
        id=persona.pk,
        server_id=persona.server_id,
        **{name: getattr(persona, name) for name in PERSONA_FIELDS},
    )


def _model_config_record(config: ServerModelConfig) -> ModelConfigRecord:
    return ModelConfigRecord(
        server_id=config.server_id,
        llm_id=config.llm_id,
        configured=bool(config.api_key),
        temperature=config.temperature,
    )


def get_server_by_disc_id(server_disc_id: int) -> ServerRecord | None:
    """Return the server with this Discord id, or None."""
    server = Server.objects.filter(server_disc_id=server_disc_id).first()
    return server_record(server) if server is not None else None


def get_server(server_id: int) -> ServerRecord | None:
    """Return the server with this internal id, or None."""
    server = Server.objects.filter(pk=server_id).first()
    return server_record(server) if server is not None else None


def load_tomori_state_rows(server_disc_id: int) -> TomoriStateRows | None:
    """Return the server, its model config and its personas, or None if unknown."""
    return load_tomori_state_rows_of([server_disc_id]).get(server_disc_id)


def load_tomori_state_rows_of(
    server_disc_ids: Collection[int],
) -> dict[int, TomoriStateRows]:
    """Return {server_disc_id: its rows} of the known servers (two queries)."""
    servers = Server.objects.select_related("model_config").filter(
        server_disc_id__in=list(server_disc_ids)
    )
    personas: dict[int, list[PersonaRecord]] = {}
    found = {server.pk: server for server in servers}
    rows = Persona.objects.filter(server_id__in=list(found)).order_by(
        "server_id", "-is_main", "position", "id"
    )
    for persona in rows:
        personas.setdefault(persona.server_id, []).append(persona_record(persona))
    return {
        server.server_disc_id: TomoriStateRows(
            server=server_record(server),
            model_config=_config_of(server),
            personas=tuple(personas.get(pk, ())),
        )
        for pk, server in found.items()
    }


def _config_of(server: Server) -> ModelConfigRecord | None:
    try:
        config: ServerModelConfig = server.model_config
    except ServerModelConfig.DoesNotExist:
        return None
    return _model_config_record(config)


def shard_servers(
    shard_ids: Sequence[int] | None, shard_count: int | None
) -> list[tuple[int, int]]:
    """Return (server_id, server_disc_id) of the servers on these shards (all: None).

    Discord puts a guild on shard (guild_id >> 22) % shard_count.
    """
    servers = Server.objects.order_by("pk")
    if shard_ids is not None and shard_count is not None:
        shard = Mod(F("server_disc_id") / 2**22, shard_count)
        servers = servers.alias(shard=shard).filter(shard__in=list(shard_ids))
    return list(servers.values_list("pk", "server_disc_id"))


def get_server_api_key(server_id: int) -> str | None:
    """Return the server's API key (kept out of every cache), or None."""
    return (
        ServerModelConfig.objects.filter(server_id=server_id)
        .values_list("api_key", flat=True)
        .first()
    )


# Writes. Each saves through the model so invalidation follows on commit.


def server_create(
    *, server_disc_id: int, name: str = "", **fields: Any
) -> ServerRecord:
    """Create a server row and return it."""
    server = build(
        Server, SERVER_FIELDS, fields, server_disc_id=server_disc_id, name=name
    )
    server.save()
    return server_record(server)


def server_update(*, server_id: int, **fields: Any) -> ServerRecord:
    """Change a server's settings (name, tool/emoji/sticker/whitelist flags)."""
    server = Server.objects.get(pk=server_id)
    save_changes(server, SERVER_FIELDS, fields)
    return server_record(server)


def model_config_set(
    *,
    server_id: int,
    llm_id: int | None,
    api_key: str | None,
    temperature: float = 1.0,
) -> ModelConfigRecord:
    """Create or replace a server's model configuration."""
    with transaction.atomic():
        config = (
            ServerModelConfig.objects.select_for_update()
            .filter(server_id=server_id)
            .first()
        ) or ServerModelConfig(server_id=server_id)
        config.llm_id = llm_id
        config.api_key = api_key
        config.temperature = temperature
        config.save()
    return _model_config_record(config)


def persona_create(*, server_id: int, name: str, **fields: Any) -> PersonaRecord:
    """Create a persona of a server and return it."""
    persona = build(Persona, PERSONA_FIELDS, fields, server_id=server_id, name=name)
    persona.save()
    return persona_record(persona)


def persona_update(*, persona_id: int, **fields: Any) -> PersonaRecord:
    """Change a persona's fields (name, prompt, llm_id, avatar, tools, order)."""
    persona = Persona.objects.get(pk=persona_id)
    save_changes(persona, PERSONA_FIELDS, fields)
    return persona_record(persona)


def persona_delete(*, persona_id: int) -> bool:
    """Delete a persona; return whether it existed."""
    persona = Persona.objects.filter(pk=persona_id).first()
    if persona is None:
        return False
    persona.delete()
    return True
