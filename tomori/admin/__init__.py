"""Django admin: the domain models, users and groups, the cache dashboard, metric_samples."""

from tomori.admin import auth, cache_dashboard, domain, metric_samples  # noqa: F401 (registers the ModelAdmins)
