"""The floor of a message's cost: a bare discord.py client that only counts messages.

Run: python benchmarks/bare_client.py --simulator-url http://127.0.0.1:PORT --port N

An unmodified `discord.Client` with the bot worker's own options
(`tomori.bot.client.client_options()`: its intents, member cache flags,
message cache size, no chunking at start), whose `on_message` adds one to a
counter: what discord.py itself spends on a message (the gateway frame, the
JSON, the Message, Member and User objects, its caches) and nothing more.
It answers GET http://127.0.0.1:N/count with {"ready": bool, "messages": n}
(read by benchmarks/message_cost.py at the edges of its window only).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator-url", required=True)
    parser.add_argument("--port", type=int, required=True, help="the /count port")
    return parser.parse_args()


async def main(options: argparse.Namespace) -> None:
    """Connect, count, serve the count until killed."""
    import discord
    from aiohttp import web

    from tomori.bot.client import client_options
    from tomori.bot.discord_target import point_discord_at, simulator_urls

    point_discord_at(simulator_urls(options.simulator_url))
    client = discord.Client(**client_options())
    seen = [0]

    @client.event
    async def on_message(message: discord.Message) -> None:
        seen[0] += 1

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"ready": client.is_ready(), "messages": seen[0]})

    app = web.Application()
    app.router.add_get("/count", count)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", options.port).start()
    await client.start("bare-client-token")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")
    import django

    django.setup()  # client_options() reads the worker's settings
    asyncio.run(main(parse_args()))
