"""App config for metrics: installs the metric sink caches report through."""

from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"

    def ready(self) -> None:
        from caches.telemetry import set_metric_sink
        from metrics.logger import emit_metric

        set_metric_sink(emit_metric)
