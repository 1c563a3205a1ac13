"""Test support: real services a test owns (its own Redis, a PostgreSQL proxy)."""
