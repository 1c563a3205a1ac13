"""Personal spotlights: a user's persona focus in one channel, until it expires."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from tomori.domain.models.base import CacheFeedingModel
from tomori.domain.models.fields import SnowflakeField, snowflake_checks
from tomori.domain.models.servers import Persona, Server
from tomori.domain.models.users import User


class PersonalSpotlight(CacheFeedingModel):
    """A user's spotlight on a persona in a channel of a server."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="spotlights")
    channel_disc_id = SnowflakeField()
    persona = models.ForeignKey(
        Persona, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "personal_spotlights"
        constraints = [
            models.UniqueConstraint(
                fields=["server", "user", "channel_disc_id"],
                name="spotlight_unique_triple",
            ),
            *snowflake_checks("spotlight", "channel_disc_id"),
        ]
        indexes = [models.Index(fields=["server", "expires_at"], name="spot_server")]

    def __str__(self) -> str:
        return f"{self.user} in #{self.channel_disc_id}"

    def clean(self) -> None:
        super().clean()
        if self.persona_id is None or self.server_id is None:
            return
        persona = self.persona
        if persona is not None and persona.server_id != self.server_id:
            raise ValidationError(
                {"persona": "The spotlighted persona must belong to this server."}
            )
