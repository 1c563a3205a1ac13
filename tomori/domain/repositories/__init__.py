"""Repositories: every ORM read used by a cache loader and every write."""
