"""Django admin for the domain models."""

from tomori.admin import domain  # noqa: F401 (registers the ModelAdmins)
