"""A bot worker joins no voice channel, so discord.py's "voice will NOT be supported" is not said."""

from __future__ import annotations

import logging

import discord
import pytest

from tomori.bot.client import build_client
from tomori.bot.pipeline import MessagePipeline


@pytest.fixture
def voice_extra_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """discord.py as on a fresh import without PyNaCl and davey: the next Client warns."""
    assert not discord.voice_client.has_nacl  # the runtime set has no voice extra
    monkeypatch.setattr(discord.VoiceClient, "warn_nacl", True)
    monkeypatch.setattr(discord.VoiceClient, "warn_dave", True)


@pytest.mark.usefixtures("voice_extra_missing")
def test_the_workers_client_does_not_warn_about_voice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="discord"):
        build_client(pipeline=MessagePipeline())
        logging.getLogger("discord.client").warning("any other warning")
    assert not discord.VoiceClient.warn_nacl  # discord.py did log them, once
    assert not discord.VoiceClient.warn_dave
    said = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [("discord.client", "WARNING", "any other warning")]


@pytest.mark.usefixtures("voice_extra_missing")
def test_a_plain_discord_client_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    """The filter is on discord.client's records: without it they are there to drop."""
    logger = logging.getLogger("discord.client")
    kept = list(logger.filters)
    for installed in kept:
        logger.removeFilter(installed)
    try:
        with caplog.at_level(logging.INFO, logger="discord"):
            discord.Client(intents=discord.Intents.none())
    finally:
        for installed in kept:
            logger.addFilter(installed)
    said = [r.getMessage() for r in caplog.records if r.name == "discord.client"]
    assert said == [
        "PyNaCl is not installed, voice will NOT be supported",
        "davey is not installed, voice will NOT be supported",
    ]
