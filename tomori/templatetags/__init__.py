"""Template filters of the cache dashboard."""
