"""Point an unmodified discord.py at a SimulatedDiscord (see tomori/bot/discord_target.py)."""

from tomori.bot.discord_target import (
    HasUrls,
    Target,
    point_discord_at,
    pointed_at,
    simulator_urls,
)

__all__ = ["HasUrls", "Target", "point_discord_at", "pointed_at", "simulator_urls"]
