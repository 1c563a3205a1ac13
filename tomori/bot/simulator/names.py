"""Word lists for plausible, reproducible names and message texts."""

from __future__ import annotations

import random

_SYLLABLES = (
    "ka",
    "ri",
    "mo",
    "to",
    "na",
    "shi",
    "yu",
    "ki",
    "ha",
    "ru",
    "mi",
    "so",
    "lo",
    "ve",
    "da",
    "ne",
    "zo",
    "ai",
    "ko",
    "ta",
    "ra",
    "ni",
    "se",
    "po",
)
_ADJECTIVES = (
    "cozy",
    "midnight",
    "pixel",
    "lazy",
    "neon",
    "quiet",
    "sunny",
    "wild",
    "tiny",
    "cosmic",
    "retro",
    "sleepy",
    "golden",
    "frosty",
    "velvet",
    "lucky",
)
_NOUNS = (
    "cafe",
    "garden",
    "club",
    "den",
    "lounge",
    "harbor",
    "arcade",
    "library",
    "studio",
    "tavern",
    "station",
    "nest",
    "forest",
    "hideout",
    "guild",
    "crew",
)
_CHANNEL_WORDS = (
    "general",
    "chat",
    "memes",
    "art",
    "music",
    "gaming",
    "help",
    "news",
    "off-topic",
    "media",
    "bots",
    "introductions",
    "events",
    "dev",
    "random",
)
_GAMES = (
    "Minecraft",
    "Genshin Impact",
    "League of Legends",
    "Valorant",
    "Osu!",
    "Stardew Valley",
    "Elden Ring",
    "Terraria",
    "Fortnite",
    "Overwatch 2",
)
_WORDS = (
    "hello",
    "anyone",
    "here",
    "lol",
    "that",
    "was",
    "so",
    "good",
    "tomori",
    "what",
    "do",
    "you",
    "think",
    "about",
    "this",
    "today",
    "really",
    "nice",
    "game",
    "later",
    "tonight",
    "maybe",
    "yes",
    "no",
    "haha",
    "wait",
    "why",
    "the",
    "new",
    "update",
    "again",
    "thanks",
    "please",
    "cute",
    "ok",
)


def username(rng: random.Random) -> str:
    """Return a lowercase username such as "kamiri_42"."""
    stem = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))
    return f"{stem}_{rng.randint(1, 999)}" if rng.random() < 0.6 else stem


def display_name(handle: str) -> str:
    """Return a display name made from a username."""
    return handle.split("_")[0].capitalize()


def guild_name(rng: random.Random) -> str:
    """Return a guild name such as "Cozy Arcade"."""
    return f"{rng.choice(_ADJECTIVES).capitalize()} {rng.choice(_NOUNS).capitalize()}"


def channel_name(rng: random.Random) -> str:
    """Return a channel name such as "memes-2"."""
    word = rng.choice(_CHANNEL_WORDS)
    return word if rng.random() < 0.5 else f"{word}-{rng.randint(2, 9)}"


def game(rng: random.Random) -> str:
    """Return the name of a game for a "Playing" activity."""
    return rng.choice(_GAMES)


def sentence(rng: random.Random) -> str:
    """Return a short chat message."""
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 12)))
