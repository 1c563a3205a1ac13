"""Tests of the short-term memory layer (`caches.layers.short_term_memory`)."""
