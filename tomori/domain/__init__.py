"""The domain: models, repositories and the settings table.

It imports nothing of the caches, the metrics or the entry points (the
import-linter layers contract in pyproject.toml); the caches install their
change tracker into the models at start (`install_change_tracker`).
"""
