"""Domain tables that the cache layers read."""

from tomori.domain.models.base import CacheFeedingModel, CacheFeedingQuerySet
from tomori.domain.models.catalogs import CatalogName, CatalogSnapshot
from tomori.domain.models.channels import (
    ChannelLlmOverride,
    ChannelPromptOverride,
    CooldownType,
    PromptMode,
    WhitelistedChannel,
    WhitelistedRole,
)
from tomori.domain.models.expressions import (
    ExpressionKind,
    ServerExpression,
    ServerExpressionSync,
)
from tomori.domain.models.integrations import GuildMcpServerConfig, NovelAiSubscription
from tomori.domain.models.memory import MemoryScope, ShortTermMemoryRecord
from tomori.domain.models.presets import PresetPersona, StPreset, StPresetNode
from tomori.domain.models.servers import Llm, Persona, Server, ServerModelConfig
from tomori.domain.models.spotlight import PersonalSpotlight
from tomori.domain.models.sprites import PersonaSprite, PersonaSpriteMessage
from tomori.domain.models.users import PrivacyLevel, User, UserBlacklist
from tomori.domain.models.webhooks import ManagedWebhook

__all__ = [
    "CacheFeedingModel",
    "CacheFeedingQuerySet",
    "CatalogName",
    "CatalogSnapshot",
    "ChannelLlmOverride",
    "ChannelPromptOverride",
    "CooldownType",
    "ExpressionKind",
    "GuildMcpServerConfig",
    "Llm",
    "ManagedWebhook",
    "MemoryScope",
    "NovelAiSubscription",
    "Persona",
    "PersonaSprite",
    "PersonaSpriteMessage",
    "PersonalSpotlight",
    "PresetPersona",
    "PrivacyLevel",
    "PromptMode",
    "Server",
    "ServerExpression",
    "ServerExpressionSync",
    "ServerModelConfig",
    "ShortTermMemoryRecord",
    "StPreset",
    "StPresetNode",
    "User",
    "UserBlacklist",
    "WhitelistedChannel",
    "WhitelistedRole",
]
