"""The caches app has no tables; this model only carries its permission."""

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
