"""metric_samples in the admin: a read-only, filterable list and SVG charts."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html

from metrics.charts import RANGES, build_charts_page
from metrics.models import MetricSample

SUMMARY_FIELDS = 6


@admin.register(MetricSample)
class MetricSampleAdmin(admin.ModelAdmin):
    """Browse samples newest first; nothing here writes (retention prunes them)."""

    list_display = ("metric_name", "created_at", "summary")
    list_filter = ("metric_name",)
    date_hierarchy = "created_at"
    list_per_page = 100
    show_full_result_count = False
    fields = ("metric_name", "created_at", "pretty_fields")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: MetricSample | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: MetricSample | None = None
    ) -> bool:
        return False

    @admin.display(description="fields")
    def summary(self, obj: MetricSample) -> str:
        """Return the first few fields as `key=value`, for the list."""
        items = list(obj.fields.items()) if isinstance(obj.fields, dict) else []
        text = ", ".join(f"{k}={v}" for k, v in items[:SUMMARY_FIELDS])
        return text + (
            f" … (+{len(items) - SUMMARY_FIELDS})"
            if len(items) > SUMMARY_FIELDS
            else ""
        )

    @admin.display(description="fields")
    def pretty_fields(self, obj: MetricSample) -> str:
        """Return the JSON fields pretty-printed."""
        text = json.dumps(obj.fields, indent=2, sort_keys=True, default=str)
        return format_html('<pre class="metric-fields">{}</pre>', text)

    def get_urls(self) -> list[URLPattern]:
        charts = path(
            "charts/",
            self.admin_site.admin_view(self.charts_view),
            name="metrics_metricsample_charts",
        )
        return [charts, *super().get_urls()]

    def charts_view(self, request: HttpRequest) -> HttpResponse:
        """Render the metric charts for the chosen range, caches and worker."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        page = build_charts_page(
            range_name=request.GET.get("range"),
            selected=request.GET.getlist("cache"),
            worker=request.GET.get("worker") or None,
        )
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Metric charts",
            "page": page,
            "ranges": list(RANGES),
        }
        return TemplateResponse(request, "admin/metrics/charts.html", context)
