"""The metric_samples table: one row per metric snapshot."""

from __future__ import annotations

from django.db import models


class MetricSample(models.Model):
    """A metric snapshot (`cache_sizes`, `host_memory`, ...) with its JSON fields."""

    metric_name = models.CharField(max_length=64)
    fields = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "metric_samples"
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["metric_name", "created_at"], name="metric_name_created_idx"
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric_name} @ {self.created_at:%Y-%m-%d %H:%M:%S}"
