"""An operator renames a persona in the admin and sees the bot serve the new name in the recent turns."""

from __future__ import annotations

import time
import uuid

import pytest
from django.contrib.auth.models import Permission

from caches import bus
from tests.tomori.admin.test_browser import SCREENSHOTS, log_in
from tests.tomori.bot.pipeline.conftest import busiest_guild
from tests.tomori.bot.worker.conftest import BotProcess
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world
from tomori.domain.models import Persona, Server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

DASHBOARD = "/admin/caches/cachecontrol/"
WAIT_SECONDS = 60


@pytest.fixture
def main_persona(operator_login) -> Persona:  # type: ignore[no-untyped-def]
    """Seed the small scenario; return the busiest guild's main persona.

    A fixture, so that it touches the database before `page` starts its loop.
    """
    for codename in ("view_persona", "change_persona"):
        operator_login.user_permissions.add(Permission.objects.get(codename=codename))
    world = generate_world(Scenario.named("small"))
    seed_world(world)
    Server.objects.update(channel_whitelist_enabled=False)  # every turn answered
    guild = busiest_guild(world)
    return Persona.objects.get(server__server_disc_id=guild, is_main=True)


def test_a_rename_in_the_admin_shows_in_the_recent_turns(  # type: ignore[no-untyped-def]
    live_server,
    operator_login,
    main_persona,
    run_bot: type[BotProcess],
    redis_url,
    settings,
    page,
) -> None:
    persona = main_persona
    channel = f"tomori:e2e:{uuid.uuid4().hex}"
    settings.REDIS_URL, settings.TOMORI_BUS_CHANNEL = redis_url, channel
    bus.configure(redis_url=redis_url, channel=channel, worker_id="admin-web")
    env = {
        "REDIS_URL": redis_url,
        "TOMORI_BUS_CHANNEL": channel,
        "WORKER_SNAPSHOT_INTERVAL_SECONDS": "1",
    }
    bot = run_bot("--simulate", "--fake-openrouter", "--traffic-rate", "100", env=env)
    try:
        bot.wait_for("bot ready", timeout=90)
        log_in(page, live_server.url, DASHBOARD)
        # The fleet's one row opens the worker's page, where its turns are.
        page.click("#fleet-workers tr[data-worker] .worker-id a")
        worker_page = page.url
        _until(page, lambda text: persona.name in text, what=persona.name)

        page.goto(f"{live_server.url}/admin/tomori/persona/{persona.pk}/change/")
        new_name = f"{persona.name} renamed"[:80]
        page.fill("#id_name", new_name)
        page.click("input[name=_save]")
        page.wait_for_selector(".messagelist")
        saved = time.monotonic()
        page.goto(worker_page)
        _until(page, lambda text: new_name in text, what=new_name)
        print(
            f"rename shown in the recent turns {time.monotonic() - saved:.1f} s after the save"
        )
        page.screenshot(
            path=str(SCREENSHOTS / "recent-turns-rename.png"), full_page=True
        )
    finally:
        bus.configure(redis_url="", channel="tomori:test:idle")


def _until(page, seen, *, what: str) -> None:  # type: ignore[no-untyped-def]
    """Reload the worker's page until the recent turns show `what` (or fail)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        turns = page.locator("table.recent-turns")
        if turns.count() and seen(turns.first.inner_text()):
            return
        page.wait_for_timeout(500)  # the worker republishes every second
        page.reload()
    raise AssertionError(f"the recent turns never showed {what!r}")
