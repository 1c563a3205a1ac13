"""ModelAdmins of every domain table, with list columns, filters and search."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from caches.operations.messages import capture_invalidations, invalidation_message
from tomori.admin.hostile import HostileInputAdminMixin, SafeModelMultipleChoiceField
from tomori.domain import models as m
from tomori.domain.models.channels import check_channel_personas
from tomori.domain.models.validation import API_KEY_MAX, validate_api_key


class DomainAdmin(HostileInputAdminMixin):
    """Base ModelAdmin of the domain tables; a save reports the caches it invalidated."""

    list_per_page = 50
    show_full_result_count = False

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        with capture_invalidations() as captured:
            response = super().changeform_view(
                request, object_id, form_url, extra_context
            )
        self._report_invalidations(request, captured, action="save")
        return response

    def delete_view(
        self,
        request: HttpRequest,
        object_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        with capture_invalidations() as captured:
            response = super().delete_view(request, object_id, extra_context)
        self._report_invalidations(request, captured, action="deletion")
        return response

    def admin_save_message(
        self, events: list[Any], *, action: str = "save"
    ) -> str | None:
        """Return the message listing the caches a save invalidated, or None."""
        return invalidation_message(events, action=action)

    def _report_invalidations(
        self, request: HttpRequest, captured: Any, *, action: str
    ) -> None:
        # The on_commit dispatch has run by now (the admin's atomic block has
        # closed); inside an outer transaction only the recorded events exist.
        events = list(captured.dispatched or captured.recorded)
        if request.method != "POST":
            return
        message = self.admin_save_message(events, action=action)
        if message:
            self.message_user(request, message, messages.INFO)


class PersonaInline(admin.TabularInline):
    model = m.Persona
    extra = 0
    fields = ("name", "is_main", "position", "llm", "tools_enabled")
    show_change_link = True


class ModelConfigForm(forms.ModelForm):
    """Server model config form that never shows or blanks the stored API key.

    The key is write-only: leaving the field empty keeps the stored key, and
    removing it takes the explicit "remove" box, so saving a server for any
    other reason cannot unconfigure it.
    """

    new_api_key = forms.CharField(
        label="API key",
        required=False,
        strip=True,
        max_length=API_KEY_MAX,
        validators=[validate_api_key],
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the stored key.",
    )
    remove_api_key = forms.BooleanField(
        label="Remove the stored API key", required=False
    )

    class Meta:
        model = m.ServerModelConfig
        fields = ("llm", "temperature")

    def save(self, commit: bool = True) -> m.ServerModelConfig:
        config = super().save(commit=False)
        if self.cleaned_data.get("remove_api_key"):
            config.api_key = None
        elif self.cleaned_data.get("new_api_key"):
            config.api_key = self.cleaned_data["new_api_key"]
        if commit:
            config.save()
        return config


class ModelConfigInline(admin.StackedInline):
    model = m.ServerModelConfig
    form = ModelConfigForm
    extra = 0
    fields = ("llm", "new_api_key", "remove_api_key", "temperature")


@admin.register(m.Server)
class ServerAdmin(DomainAdmin):
    list_display = (
        "name",
        "server_disc_id",
        "id",
        "tool_use_enabled",
        "emoji_usage_enabled",
        "sticker_usage_enabled",
        "channel_whitelist_enabled",
        "updated_at",
    )
    list_filter = (
        "tool_use_enabled",
        "emoji_usage_enabled",
        "sticker_usage_enabled",
        "channel_whitelist_enabled",
    )
    search_fields = ("name", "=server_disc_id")
    inlines = (ModelConfigInline, PersonaInline)


@admin.register(m.ServerModelConfig)
class ServerModelConfigAdmin(DomainAdmin):
    list_display = ("server", "llm", "has_api_key", "temperature", "updated_at")
    list_select_related = ("server", "llm")
    search_fields = ("server__name", "=server__server_disc_id")
    form = ModelConfigForm
    fields = ("server", "llm", "new_api_key", "remove_api_key", "temperature")

    @admin.display(boolean=True, description="API key")
    def has_api_key(self, obj: m.ServerModelConfig) -> bool:
        return obj.api_key is not None


@admin.register(m.Persona)
class PersonaAdmin(DomainAdmin):
    list_display = ("name", "server", "is_main", "position", "llm", "tools_enabled")
    list_filter = ("is_main", "tools_enabled")
    list_select_related = ("server", "llm")
    search_fields = ("name", "server__name", "=server__server_disc_id")
    autocomplete_fields = ("server",)


@admin.register(m.Llm)
class LlmAdmin(DomainAdmin):
    list_display = (
        "codename",
        "provider",
        "display_name",
        "is_default",
        "is_active",
        "supports_tools",
        "supports_vision",
        "context_length",
    )
    list_filter = ("provider", "is_default", "is_active", "supports_tools")
    search_fields = ("codename", "display_name")


@admin.register(m.User)
class UserAdmin(DomainAdmin):
    list_display = (
        "username",
        "user_disc_id",
        "privacy_level",
        "language",
        "updated_at",
    )
    list_filter = ("privacy_level", "language")
    search_fields = ("username", "=user_disc_id")


@admin.register(m.UserBlacklist)
class UserBlacklistAdmin(DomainAdmin):
    list_display = ("user", "server", "reason", "created_at")
    list_select_related = ("user", "server")
    search_fields = ("user__username", "=user__user_disc_id", "server__name")
    autocomplete_fields = ("server", "user")


class PersonaChoiceField(SafeModelMultipleChoiceField):
    """Personas labelled with their server: several servers have a "Tomori"."""

    def label_from_instance(self, obj: m.Persona) -> str:
        return f"{obj.name} ({obj.server})"


class WhitelistedChannelForm(forms.ModelForm):
    """Offer only the channel's own server's personas, and reject any other.

    A new channel has no server yet: every persona is offered (labelled with
    its server) and the choice is checked against the server picked.
    """

    class Meta:
        model = m.WhitelistedChannel
        fields = (
            "server",
            "channel_disc_id",
            "personas",
            "cooldown_type",
            "cooldown_seconds",
        )
        field_classes = {"personas": PersonaChoiceField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["personas"]
        assert isinstance(field, forms.ModelMultipleChoiceField)
        personas = m.Persona.objects.select_related("server")
        if self.instance.server_id is not None:
            personas = personas.filter(server_id=self.instance.server_id)
        field.queryset = personas

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        server, personas = data.get("server"), data.get("personas")
        if server is not None and personas is not None:
            try:
                check_channel_personas(server.pk, personas)
            except ValidationError as exc:
                self.add_error("personas", exc)
        return data


@admin.register(m.WhitelistedChannel)
class WhitelistedChannelAdmin(DomainAdmin):
    form = WhitelistedChannelForm
    list_display = ("channel_disc_id", "server", "cooldown_type", "cooldown_seconds")
    list_filter = ("cooldown_type",)
    list_select_related = ("server",)
    search_fields = ("=channel_disc_id", "server__name")
    filter_horizontal = ("personas",)
    autocomplete_fields = ("server",)


@admin.register(m.WhitelistedRole)
class WhitelistedRoleAdmin(DomainAdmin):
    list_display = ("role_disc_id", "server")
    list_select_related = ("server",)
    search_fields = ("=role_disc_id", "server__name")


@admin.register(m.ChannelLlmOverride)
class ChannelLlmOverrideAdmin(DomainAdmin):
    list_display = ("channel_disc_id", "server", "llm", "updated_at")
    list_select_related = ("server", "llm")
    search_fields = ("=channel_disc_id", "server__name")


@admin.register(m.ChannelPromptOverride)
class ChannelPromptOverrideAdmin(DomainAdmin):
    list_display = ("channel_disc_id", "server", "mode", "updated_at")
    list_filter = ("mode",)
    list_select_related = ("server",)
    search_fields = ("=channel_disc_id", "server__name", "prompt")


@admin.register(m.ServerExpression)
class ServerExpressionAdmin(DomainAdmin):
    list_display = ("name", "kind", "server", "expression_disc_id", "animated")
    list_filter = ("kind", "animated")
    list_select_related = ("server",)
    search_fields = ("name", "=expression_disc_id", "server__name")


@admin.register(m.ServerExpressionSync)
class ServerExpressionSyncAdmin(DomainAdmin):
    list_display = ("server", "emoji_count", "sticker_count", "last_synced_at")
    list_select_related = ("server",)
    search_fields = ("server__name",)


class SpriteInline(admin.TabularInline):
    model = m.PersonaSprite
    extra = 0
    fields = ("position", "name", "image_url", "instructions")


@admin.register(m.PersonaSprite)
class PersonaSpriteAdmin(DomainAdmin):
    list_display = ("name", "persona", "position", "image_url")
    list_select_related = ("persona",)
    search_fields = ("name", "persona__name")


@admin.register(m.PersonaSpriteMessage)
class PersonaSpriteMessageAdmin(DomainAdmin):
    list_display = (
        "message_disc_id",
        "persona",
        "sprite_name",
        "channel_disc_id",
        "created_at",
    )
    list_select_related = ("persona",)
    search_fields = ("=message_disc_id", "sprite_name")
    date_hierarchy = "created_at"


@admin.register(m.PersonalSpotlight)
class PersonalSpotlightAdmin(DomainAdmin):
    list_display = ("user", "server", "channel_disc_id", "persona", "expires_at")
    list_select_related = ("user", "server", "persona")
    search_fields = ("user__username", "=channel_disc_id", "server__name")
    autocomplete_fields = ("server", "user")


@admin.register(m.ManagedWebhook)
class ManagedWebhookAdmin(DomainAdmin):
    list_display = (
        "webhook_disc_id",
        "channel_disc_id",
        "server",
        "token",
        "key_version",
    )
    list_filter = ("key_version",)
    search_fields = ("=webhook_disc_id", "=channel_disc_id")
    exclude = ("token_ciphertext",)
    readonly_fields = ("token", "key_version")

    @admin.display(description="token")
    def token(self, obj: m.ManagedWebhook) -> str:
        return "•••••• (encrypted)" if obj.token_ciphertext else "—"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(m.PresetPersona)
class PresetPersonaAdmin(DomainAdmin):
    list_display = ("name", "avatar_path", "is_active")
    list_filter = ("is_active",)
    search_fields = ("name",)


class StPresetNodeInline(admin.TabularInline):
    model = m.StPresetNode
    extra = 0


@admin.register(m.StPreset)
class StPresetAdmin(DomainAdmin):
    list_display = ("name", "server", "is_active", "updated_at")
    list_filter = ("is_active",)
    list_select_related = ("server",)
    search_fields = ("name", "server__name")
    inlines = (StPresetNodeInline,)


@admin.register(m.StPresetNode)
class StPresetNodeAdmin(DomainAdmin):
    list_display = ("preset", "position", "role", "enabled")
    list_filter = ("role", "enabled")
    list_select_related = ("preset",)
    search_fields = ("content",)


@admin.register(m.GuildMcpServerConfig)
class GuildMcpServerConfigAdmin(DomainAdmin):
    list_display = ("name", "server", "url", "enabled", "tool_names_updated_at")
    list_filter = ("enabled",)
    list_select_related = ("server",)
    search_fields = ("name", "url", "server__name")


@admin.register(m.NovelAiSubscription)
class NovelAiSubscriptionAdmin(DomainAdmin):
    list_display = ("server", "tier", "context_limit", "checked_at")
    list_filter = ("tier",)
    list_select_related = ("server",)
    search_fields = ("server__name",)


@admin.register(m.ShortTermMemoryRecord)
class ShortTermMemoryRecordAdmin(DomainAdmin):
    list_display = ("cache_key", "scope", "turn_count", "updated_at")
    list_filter = ("scope",)
    search_fields = ("cache_key", "summary")
    date_hierarchy = "updated_at"


@admin.register(m.CatalogSnapshot)
class CatalogSnapshotAdmin(DomainAdmin):
    list_display = ("catalog", "model_count", "fetched_at")
    readonly_fields = ("catalog", "model_count", "fetched_at")
    exclude = ("payload",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[m.CatalogSnapshot]:
        return super().get_queryset(request).defer("payload")


PersonaAdmin.inlines = (SpriteInline,)
