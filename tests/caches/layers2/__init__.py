"""Tests of the cache layers II: short-term memory, transcripts, tables, webhooks."""
