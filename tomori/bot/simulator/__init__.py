"""A simulated Discord (gateway + REST on loopback) for the real discord.py client.

sim = SimulatedDiscord("small")          # or "production", a JSON path, a Scenario
await sim.start()
with pointed_at(sim):                    # Route.BASE and DEFAULT_GATEWAY
    task = asyncio.create_task(client.start("any-token"))
    ...                                  # wait for on_ready, then:
    await sim.send_messages(100)         # Zipf-drawn MESSAGE_CREATEs
await sim.stop()
"""

from tomori.bot.simulator.connect import point_discord_at, pointed_at
from tomori.bot.simulator.generator import generate_world
from tomori.bot.simulator.records import SentMessage, SimStats, UnknownRoute
from tomori.bot.simulator.scenario import BOT_USER_ID, Scenario
from tomori.bot.simulator.server import SimulatedDiscord
from tomori.bot.simulator.traffic import PlannedMessage, TrafficModel
from tomori.bot.simulator.world import World

__all__ = [
    "BOT_USER_ID",
    "PlannedMessage",
    "Scenario",
    "SentMessage",
    "SimStats",
    "SimulatedDiscord",
    "TrafficModel",
    "UnknownRoute",
    "World",
    "generate_world",
    "point_discord_at",
    "pointed_at",
]
