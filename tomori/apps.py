"""App config for the Tomori domain."""

from django.apps import AppConfig


class TomoriConfig(AppConfig):
    name = "tomori"
    verbose_name = "Tomori domain"

    def ready(self) -> None:
        from tomori import checks  # noqa: F401 (registers the system checks)
        from tomori.knobs import knobs
        from tomori.models.channels import connect_persona_guard

        knobs()  # read once at start: a mistyped knob override stops it here
        connect_persona_guard()
