"""App config for the Tomori domain."""

from django.apps import AppConfig


class TomoriConfig(AppConfig):
    name = "tomori"
    verbose_name = "Tomori domain"

    def ready(self) -> None:
        from tomori import checks  # noqa: F401 (registers the system checks)
        from tomori.models.channels import connect_persona_guard

        connect_persona_guard()
