"""Run the simulated Discord from the command line until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging

from tomori.bot.simulator.generator import generate_world
from tomori.bot.simulator.scenario import Scenario
from tomori.bot.simulator.server import SimulatedDiscord


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m tomori.bot.simulator",
        description="Serve a simulated Discord gateway and REST API on loopback.",
    )
    parser.add_argument(
        "--scenario", default="small", help="small, production or a JSON file"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--traffic",
        type=float,
        default=0.0,
        help="messages per second to send (0: none)",
    )
    parser.add_argument(
        "--totals",
        action="store_true",
        help="print the scenario totals as JSON and exit",
    )
    return parser.parse_args(argv)


async def serve(options: argparse.Namespace) -> None:
    """Start the simulator, print its URLs and serve (with traffic) until cancelled."""
    sim = SimulatedDiscord(
        Scenario.named(options.scenario), host=options.host, port=options.port
    )
    await sim.start()
    print(f"scenario:    {sim.scenario.name} {json.dumps(sim.world.totals())}")
    print(f"REST base:   {sim.base_url}")
    print(f"gateway:     {sim.gateway_url}")
    print(f"bot user id: {sim.bot_user_id}", flush=True)
    try:
        if options.traffic > 0:
            await sim.wait_for_identify(1)
            await sim.run_traffic(options.traffic)
        else:
            await asyncio.Event().wait()
    finally:
        await sim.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the command line."""
    options = parse_args(argv)
    if options.totals:
        scenario = Scenario.named(options.scenario)
        print(json.dumps(generate_world(scenario).totals(), indent=2))
        return
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(options))


if __name__ == "__main__":
    main()
