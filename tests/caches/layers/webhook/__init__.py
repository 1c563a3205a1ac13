"""Tests of the webhook layers (`caches.layers.webhook`, `webhook_identity`)."""
