"""What the simulated Discord looks like: sizes, shares and traffic, as data."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOT_USER_ID = 1_180_000_000_000_000_001


@dataclass(frozen=True)
class Scenario:
    """Parameters of a simulated Discord; generate_world() turns them into guilds.

    Totals count what discord.py caches: members include the bot's own member
    in every guild, channels include categories, voice channels and threads,
    presences are the non-offline members summed over guilds.
    """

    name: str = "custom"
    seed: int = 1
    guild_count: int = 5
    members_total: int = 400
    # Distinct users behind the members; None means one user per member slot.
    users_total: int | None = None
    # Explicit per-guild member counts (bot included) instead of the Zipf split.
    member_counts: tuple[int, ...] | None = None
    size_zipf_s: float = 1.0
    min_members: int = 3
    channels_total: int = 60
    category_fraction: float = 0.1
    voice_channel_fraction: float = 0.2
    thread_fraction: float = 0.15
    roles_total: int = 30
    emojis_total: int = 40
    stickers_total: int = 8
    online_fraction: float = 0.38
    activity_fraction: float = 0.5
    voice_fraction: float = 0.03
    bot_fraction: float = 0.04
    webhook_guild_fraction: float = 0.4
    message_rate: float = 20.0
    guild_zipf_s: float = 1.1
    user_zipf_s: float = 1.0
    channel_zipf_s: float = 1.2
    thread_message_fraction: float = 0.1
    bot_message_fraction: float = 0.05
    webhook_message_fraction: float = 0.03
    mention_bot_fraction: float = 0.05
    recommended_shards: int = 1
    bot_user_id: int = BOT_USER_ID
    bot_name: str = "Tomori"

    def __post_init__(self) -> None:
        problems = []
        if self.guild_count < 1 or self.min_members < 2:
            problems.append("need guild_count >= 1 and min_members >= 2")
        if self.member_counts is not None and (
            len(self.member_counts) != self.guild_count or min(self.member_counts) < 2
        ):
            problems.append("member_counts needs guild_count entries, each >= 2")
        fractions = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name.endswith("_fraction")
        }
        problems += [
            f"{k} must be within 0..1" for k, v in fractions.items() if not 0 <= v <= 1
        ]
        if problems:
            raise ValueError(f"scenario {self.name!r}: " + "; ".join(problems))

    @classmethod
    def small(cls) -> Scenario:
        """Return a fast scenario: 5 guilds, one large enough to be chunked."""
        return cls(
            name="small",
            seed=7,
            guild_count=5,
            members_total=410,
            users_total=380,
            # 320 >= discord.py's large_threshold (250): its GUILD_CREATE carries
            # only online, voice and bot members, the rest come by chunking.
            member_counts=(320, 40, 25, 15, 10),
            channels_total=48,
            roles_total=25,
            emojis_total=30,
            stickers_total=6,
            voice_fraction=0.05,
            bot_fraction=0.06,
        )

    @classmethod
    def production(cls) -> Scenario:
        """Return the spec's production snapshot: ~516 guilds, ~31,800 members."""
        return cls(
            name="production",
            seed=516,
            guild_count=516,
            members_total=31_800,
            users_total=27_100,
            size_zipf_s=1.0,
            channels_total=11_200,
            category_fraction=0.1,
            voice_channel_fraction=0.2,
            thread_fraction=0.1,
            roles_total=5_200,
            emojis_total=6_500,
            stickers_total=600,
            # The bot's own presence in each guild adds ~516 to the ~12,100.
            online_fraction=0.37,
            voice_fraction=0.01,
            bot_fraction=0.03,
            webhook_guild_fraction=0.3,
            message_rate=50.0,
            recommended_shards=1,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        """Return a scenario from a dict; "extends" names a preset to start from."""
        data = dict(data)
        base = cls.named(data.pop("extends")) if "extends" in data else cls()
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown scenario fields: {', '.join(unknown)}")
        if data.get("member_counts") is not None:
            data["member_counts"] = tuple(int(x) for x in data["member_counts"])
            data.setdefault("guild_count", len(data["member_counts"]))
        return dataclasses.replace(base, **data)

    @classmethod
    def from_file(cls, path: str | Path) -> Scenario:
        """Return the scenario described by a JSON file."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a scenario file holds one JSON object")
        data.setdefault("name", Path(path).stem)
        return cls.from_dict(data)

    @classmethod
    def named(cls, name: str) -> Scenario:
        """Return the preset called name ("small", "production") or load a file."""
        presets = {"small": cls.small, "production": cls.production}
        if name in presets:
            return presets[name]()
        if Path(name).is_file():
            return cls.from_file(name)
        raise ValueError(f"no scenario preset or file named {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """Return the scenario as a JSON-ready dict (from_dict reads it back)."""
        data = dataclasses.asdict(self)
        if self.member_counts is not None:
            data["member_counts"] = list(self.member_counts)
        return data
