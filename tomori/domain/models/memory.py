"""Durable part of short-term memory: summaries, categories and turn counters."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tomori.domain.models import validation as v
from tomori.domain.models.fields import (
    BoundedTextField,
    SafeJSONField,
    SingleLineField,
    SnowflakeField,
    length_checks,
    snowflake_checks,
)


class MemoryScope(models.TextChoices):
    USER = "user", "user"
    SERVER = "server", "server"


class ShortTermMemoryRecord(models.Model):
    """The durable fields of one short-term memory entry (raw messages stay in memory)."""

    cache_key = SingleLineField(max_length=200, unique=True)
    scope = models.CharField(max_length=10, choices=MemoryScope.choices)
    user_disc_id = SnowflakeField(null=True, blank=True)
    server_disc_id = SnowflakeField(null=True, blank=True)
    channel_disc_id = SnowflakeField()
    persona_id = models.BigIntegerField(null=True, blank=True)
    summary = BoundedTextField(max_length=v.SUMMARY_MAX, blank=True)
    categories = SafeJSONField(
        default=list, blank=True, validators=[v.JsonShapeValidator("list")]
    )
    turn_count = models.PositiveIntegerField(default=0)
    summarized_turn_count = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "short_term_memory"
        indexes = [
            models.Index(fields=["scope", "server_disc_id"], name="stm_server_idx"),
            models.Index(fields=["scope", "user_disc_id"], name="stm_user_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(scope__in=["user", "server"]), name="stm_scope_valid"
            ),
            *snowflake_checks(
                "stm", "user_disc_id", "server_disc_id", "channel_disc_id"
            ),
            *length_checks("stm", summary=v.SUMMARY_MAX),
        ]

    def __str__(self) -> str:
        return self.cache_key
