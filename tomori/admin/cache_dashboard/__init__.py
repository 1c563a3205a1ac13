"""The cache dashboard in the admin, hung on the CacheControl permission holder."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import URLPattern, path

from caches.models import CacheControl
from tomori.admin.cache_dashboard.views import DashboardViews


@admin.register(CacheControl)
class CacheControlAdmin(admin.ModelAdmin):
    """No rows: its changelist is the dashboard, its other URLs the buttons."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        views = DashboardViews(self).wrapped()
        wrap = self.admin_site.admin_view
        routes = [
            ("", "dashboard", "caches_cachecontrol_changelist"),
            # Worker ids hold colons (host:pid:shard3) and whatever
            # TOMORI_WORKER_ID holds, a slash included.
            ("worker/<path:worker_id>/", "worker", "caches_worker"),
            ("cache/<str:name>/", "cache", "caches_cache"),
            ("clear/", "clear", "caches_clear_cache"),
            ("invalidate/", "invalidate", "caches_invalidate_key"),
            ("clear-all/", "clear_all", "caches_clear_all"),
            ("catalogs/", "catalogs", "caches_refresh_catalogs"),
            ("emergency/", "emergency", "caches_emergency_clear"),
        ]
        return [
            path(route, wrap(views[view]), name=name) for route, view, name in routes
        ]
