"""Server emojis and stickers, and when they were last synced from Discord."""

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


class ExpressionKind(models.TextChoices):
    EMOJI = "emoji", "emoji"
    STICKER = "sticker", "sticker"


class ServerExpression(CacheFeedingModel):
    """One emoji or sticker of a server, as last synced."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="expressions"
    )
    kind = models.CharField(max_length=10, choices=ExpressionKind.choices)
    expression_disc_id = SnowflakeField()
    name = SingleLineField(max_length=v.NAME_MAX)
    animated = models.BooleanField(default=False)
    description = SingleLineField(max_length=200, blank=True)

    class Meta:
        db_table = "server_expressions"
        ordering = ["server", "kind", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "expression_disc_id"], name="expression_unique_disc_id"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["emoji", "sticker"]), name="expression_kind"
            ),
            *snowflake_checks("expression", "expression_disc_id"),
        ]
        indexes = [models.Index(fields=["server", "kind"], name="expr_server_kind")]

    def __str__(self) -> str:
        return f":{self.name}: ({self.kind})"


class ServerExpressionSync(CacheFeedingModel):
    """What the last emoji/sticker sync of a server stored, and when."""

    server = models.OneToOneField(
        Server, on_delete=models.CASCADE, related_name="expression_sync"
    )
    emoji_count = models.PositiveIntegerField(default=0)
    sticker_count = models.PositiveIntegerField(default=0)
    last_synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "server_expression_sync"

    def __str__(self) -> str:
        return f"sync of {self.server}"
