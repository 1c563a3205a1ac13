"""Tests of the cache layers (`caches.layers`): one module or folder per layer."""
