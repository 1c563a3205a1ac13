"""Run the bot worker: discord.py with every cache layer, the guard, sweepers and metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core import checks
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS

from caches import process_identity
from tomori.bot.lock import ShardLockError
from tomori.bot.worker import BotWorker, WorkerOptions, exit_if_blocked_in_database
from tomori.domain.knobs import knobs


def _shard_ids(text: str) -> list[int]:
    try:
        ids = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise CommandError(
            f"--shard-ids {text!r}: expected comma-separated integers"
        ) from None
    if not ids or ids[0] < 0:
        raise CommandError(f"--shard-ids {text!r}: expected integers >= 0")
    return ids


class Command(BaseCommand):
    help = (
        "Run the Discord bot worker. Without DISCORD_TOKEN (or with --simulate) it "
        "connects the unmodified discord.py client to the built-in simulated Discord."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--simulate",
            action="store_true",
            default=None,
            help="use the simulated Discord (default when DISCORD_TOKEN is unset)",
        )
        mode.add_argument(
            "--no-simulate",
            dest="simulate",
            action="store_false",
            help="connect to Discord with DISCORD_TOKEN",
        )
        parser.add_argument(
            "--scenario",
            default="small",
            help="simulated Discord: small, production or a JSON file",
        )
        parser.add_argument(
            "--duration",
            type=float,
            default=None,
            help="stop after this many seconds (default: run until signalled)",
        )
        parser.add_argument(
            "--shard-ids", default=None, help="comma-separated shard ids"
        )
        parser.add_argument("--shard-count", type=int, default=None)
        parser.add_argument(
            "--serve-admin",
            action="store_true",
            help="serve the Django admin from this process (embedded mode)",
        )
        parser.add_argument("--admin-port", type=int, default=8000)
        parser.add_argument(
            "--traffic-rate",
            type=float,
            default=None,
            help="simulated messages per second (default: the scenario's)",
        )
        parser.add_argument(
            "--simulator-url",
            default="",
            metavar="URL",
            help="with --simulate: connect to a simulated Discord served by another "
            "process (python -m tomori.bot.simulator) at http://host:port, which "
            "sends the traffic, instead of the built-in one",
        )
        parser.add_argument(
            "--fake-openrouter",
            action="store_true",
            help="serve sample OpenRouter catalogs from a loopback fake",
        )
        parser.add_argument(
            "--wait-for-lock",
            action="store_true",
            help="wait for a shard held by another runbot instead of refusing",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if not opts.get("skip_checks"):
            # The checks that read the database (stored webhook key versions).
            self.check(tags=[checks.Tags.database], databases=[DEFAULT_DB_ALIAS])
        options = self._options(opts)
        worker_options_note = "simulated Discord" if options.simulate else "Discord"
        self.stdout.write(f"runbot: connecting to {worker_options_note}")
        worker = BotWorker(options)
        # Before the bus is built: its origin (and its outbox rows') names this worker.
        process_identity.set_kind("worker", name=worker.worker_id)
        admin: list[Any] = []  # started once the shard lock is ours
        try:
            code = asyncio.run(
                worker.run(on_locked=lambda: admin.append(self._start_admin(options)))
            )
        except ShardLockError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            for server in filter(None, admin):
                server.stop()
        # A thread blocked in a hung database would be joined at exit forever.
        exit_if_blocked_in_database(code)
        worker.disarm_watchdog()
        if code:
            raise CommandError(worker.exit_reason or f"worker exited with {code}")

    def _options(self, opts: dict[str, Any]) -> WorkerOptions:
        token = knobs().DISCORD_TOKEN
        simulate = opts["simulate"] if opts["simulate"] is not None else not token
        if not simulate and not token:
            raise CommandError("--no-simulate needs DISCORD_TOKEN")
        simulator_url = opts["simulator_url"]
        if simulator_url:
            if not simulate:
                raise CommandError("--simulator-url goes with --simulate")
            if opts["traffic_rate"] is not None:
                raise CommandError(
                    "--traffic-rate drives the built-in simulated Discord; with "
                    "--simulator-url the simulator process sends the traffic "
                    "(its --traffic)"
                )
            from tomori.bot.discord_target import simulator_urls

            try:
                simulator_urls(simulator_url)
            except ValueError as exc:
                raise CommandError(f"--simulator-url {exc}") from None
        shard_ids = _shard_ids(opts["shard_ids"]) if opts["shard_ids"] else None
        shard_count = opts["shard_count"]
        if (shard_ids is None) != (shard_count is None):
            raise CommandError("--shard-ids and --shard-count go together")
        if shard_ids and shard_count is not None and shard_ids[-1] >= shard_count:
            raise CommandError(
                f"--shard-ids {shard_ids} must be below --shard-count {shard_count}"
            )
        return WorkerOptions(
            token=token,
            simulate=simulate,
            scenario=opts["scenario"],
            shard_ids=shard_ids,
            shard_count=shard_count,
            duration=opts["duration"],
            serve_admin=opts["serve_admin"],
            admin_port=opts["admin_port"],
            traffic_rate=opts["traffic_rate"],
            fake_openrouter=opts["fake_openrouter"],
            wait_for_lock=opts["wait_for_lock"],
            simulator_url=simulator_url,
        )

    def _start_admin(self, options: WorkerOptions) -> Any:
        if not options.serve_admin:
            return None
        from tomori.bot.admin_server import AdminServer

        server = AdminServer(options.admin_host, options.admin_port)
        try:
            port = server.start()
        except OSError as exc:
            raise CommandError(
                f"cannot serve the admin on port {options.admin_port}: {exc}"
            ) from exc
        self.stdout.write(f"admin: http://{options.admin_host}:{port}/admin/")
        return server
