"""The metrics log file's handler: opened by the first metric line, not by loading settings."""

from __future__ import annotations

import logging.handlers
from io import TextIOWrapper
from pathlib import Path
from typing import Any


class MetricsFileHandler(logging.handlers.WatchedFileHandler):
    """A `WatchedFileHandler` that creates its file (and folders) on the first line it writes.

    Settings name the file; configuring logging builds this handler but
    touches nothing, so `manage.py check` with a mistyped path leaves no
    stray file or folder: only a process that logs a metric creates it.
    """

    def __init__(self, filename: str, **kwargs: Any) -> None:
        kwargs["delay"] = True
        super().__init__(filename, **kwargs)

    def _open(self) -> TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()
