"""python -m tomori.bot.simulator prints its URLs and stops cleanly on Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
TIMEOUT = 15.0


async def test_cli_serves_until_interrupted():
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tomori.bot.simulator", "--scenario", "small"],
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        lines = [
            (await asyncio.wait_for(process.stdout.readline(), TIMEOUT)).decode()
            for _ in range(4)
        ]
        assert lines[1].startswith("REST base:   http://127.0.0.1:")
        assert lines[2].startswith("gateway:     ws://127.0.0.1:")
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), TIMEOUT) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
