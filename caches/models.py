"""The caches app's tables: the invalidation outbox, and the dashboard's permission holder."""

from django.db import models


class CacheControl(models.Model):
    """Unmanaged holder of the `caches.manage_caches` permission."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [("manage_caches", "Can clear and invalidate caches")]
        verbose_name = "cache dashboard"
        verbose_name_plural = "cache dashboard"

    def __str__(self) -> str:
        return "cache dashboard"


class InvalidationOutbox(models.Model):
    """The invalidation events of one write, stored in the write's own transaction.

    Redis pub/sub is the fast path; every bot worker also reads this table
    after the last id it applied (`caches.outbox`), so an invalidation whose
    write committed reaches every worker even when the writer died right
    after the commit or Redis was cut, paused or restarted.
    """

    id = models.BigAutoField(primary_key=True)
    created_at = models.DateTimeField(db_index=True)
    origin = models.CharField(max_length=200)
    events = models.JSONField()
    #: The writing transaction of a row a database trigger recorded
    #: (`caches.outbox.capture`); None for rows Django wrote.
    tx = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "caches_invalidation_outbox"
        indexes = [
            models.Index(
                fields=["tx"], condition=models.Q(tx__isnull=False), name="outbox_tx"
            )
        ]
        default_permissions = ()
        verbose_name = "invalidation outbox row"

    def __str__(self) -> str:
        return f"outbox #{self.id} from {self.origin}"
