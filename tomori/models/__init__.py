"""Domain tables that the cache layers read."""

from tomori.models.base import CacheFeedingModel, CacheFeedingQuerySet
from tomori.models.catalogs import CatalogName, CatalogSnapshot
from tomori.models.channels import (
    ChannelLlmOverride,
    ChannelPromptOverride,
    CooldownType,
    PromptMode,
    WhitelistedChannel,
    WhitelistedRole,
)
from tomori.models.expressions import (
    ExpressionKind,
    ServerExpression,
    ServerExpressionSync,
)
from tomori.models.integrations import GuildMcpServerConfig, NovelAiSubscription
from tomori.models.memory import MemoryScope, ShortTermMemoryRecord
from tomori.models.presets import PresetPersona, StPreset, StPresetNode
from tomori.models.servers import Llm, Persona, Server, ServerModelConfig
from tomori.models.spotlight import PersonalSpotlight
from tomori.models.sprites import PersonaSprite, PersonaSpriteMessage
from tomori.models.users import PrivacyLevel, User, UserBlacklist
from tomori.models.webhooks import ManagedWebhook

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
