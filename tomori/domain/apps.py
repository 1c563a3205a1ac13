"""App config for the Tomori domain."""

from django.apps import AppConfig


class DomainConfig(AppConfig):
    name = "tomori.domain"
    label = "tomori"
    verbose_name = "Tomori domain"

    def ready(self) -> None:
        from tomori.domain.knobs import knobs
        from tomori.domain.models.channels import connect_persona_guard

        knobs()  # read once at start: a mistyped knob override stops it here
        connect_persona_guard()
