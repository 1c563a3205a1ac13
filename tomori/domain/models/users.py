"""Users, their privacy level and per-server blacklist."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tomori.domain.models import validation as v
from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import (
    SingleLineField,
    SnowflakeField,
    snowflake_checks,
)
from tomori.domain.models.servers import Server


class PrivacyLevel(models.IntegerChoices):
    OPEN = 0, "open"
    STANDARD = 1, "standard"
    PRIVATE = 2, "private"
    RESTRICTED = 3, "restricted (most restrictive)"


class User(CacheFeedingModel):
    """A Discord user known to the bot."""

    user_disc_id = SnowflakeField(unique=True)
    username = SingleLineField(max_length=v.NAME_MAX, blank=True)
    privacy_level = models.PositiveSmallIntegerField(
        choices=PrivacyLevel.choices, default=PrivacyLevel.STANDARD
    )
    language = SingleLineField(max_length=10, default="en")
    personal_memories_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "users"
        ordering = ["username"]
        constraints = [
            models.CheckConstraint(
                condition=Q(privacy_level__lte=3), name="user_privacy_level_range"
            ),
            *snowflake_checks("user", "user_disc_id"),
        ]

    def __str__(self) -> str:
        return self.username or str(self.user_disc_id)


class UserBlacklist(CacheFeedingModel):
    """A user barred from talking to the bot in one server."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="blacklist"
    )
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="blacklists")
    reason = SingleLineField(max_length=v.REASON_MAX, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "user_blacklist"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "user"], name="blacklist_unique_server_user"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.server}"
