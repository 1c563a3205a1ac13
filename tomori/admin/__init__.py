"""Django admin for the domain models (and Django's users and groups)."""

from tomori.admin import auth, domain  # noqa: F401 (registers the ModelAdmins)
