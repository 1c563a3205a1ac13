"""Create the demo admin user and the domain rows of a simulated Discord scenario."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandError, CommandParser

DEMO_USERNAME = "admin"
DEMO_PASSWORD = "tomori-demo"


class Command(BaseCommand):
    help = "Seed demo data for the simulated Discord (development only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--scenario", default="small", help="small, production or a JSON file"
        )
        parser.add_argument(
            "--no-user", action="store_true", help="do not create the admin user"
        )

    def handle(self, *args: Any, scenario: str, no_user: bool, **options: Any) -> None:
        from tomori.bot.demo import seed_world
        from tomori.bot.simulator import Scenario, generate_world

        if not no_user:
            self._demo_user()
        try:
            world = generate_world(Scenario.named(scenario))
        except (OSError, ValueError) as exc:
            raise CommandError(f"--scenario {scenario!r}: {exc}") from exc
        counts = seed_world(world)
        if not any(counts.values()):
            self.stdout.write(
                f"demo data for scenario {scenario!r} is already there: nothing to add"
            )
            return
        summary = ", ".join(f"{name} {count}" for name, count in counts.items())
        self.stdout.write(f"demo data for scenario {scenario!r} added: {summary}")

    def _demo_user(self) -> None:
        if not settings.DEBUG:
            self.stdout.write("DEBUG is off: no demo admin user created")
            return
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=DEMO_USERNAME, defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        user.user_permissions.add(Permission.objects.get(codename="manage_caches"))
        self.stdout.write(
            self.style.WARNING(
                f"demo admin (development only): {DEMO_USERNAME} / {DEMO_PASSWORD} "
                f"at http://127.0.0.1:{os.environ.get('TOMORI_ADMIN_PORT') or 8000}/admin/"
            )
        )
