"""Stored OpenRouter catalog snapshots, one row per catalog."""

from __future__ import annotations

from django.db import models


class CatalogName(models.TextChoices):
    TEXT = "text", "text (/models)"
    EMBEDDING = "embedding", "embedding (/embeddings/models)"
    IMAGE = "image", "image (/images/models)"
    VIDEO = "video", "video (/videos/models)"


class CatalogSnapshot(models.Model):
    """The last successful fetch of one OpenRouter catalog."""

    catalog = models.CharField(max_length=20, choices=CatalogName.choices, unique=True)
    payload = models.JSONField()
    model_count = models.PositiveIntegerField()
    fetched_at = models.DateTimeField()

    class Meta:
        db_table = "openrouter_catalog_snapshots"

    def __str__(self) -> str:
        return f"{self.catalog}: {self.model_count} models"
