"""Serve the Django admin from a thread of the bot worker (embedded, single-process mode).

On the embedded default (SQLite, no Redis) the admin must share the worker's
process so the in-process bus and live snapshot reach it.
"""

from __future__ import annotations

import logging
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.wsgi import get_wsgi_application

logger = logging.getLogger(__name__)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        logger.debug("admin %s", format % args)


class AdminServer:
    """A threaded WSGI server for the admin; `start()` returns the bound port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8000) -> None:
        self.host = host
        self.port = port
        self._server: _ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        app = StaticFilesHandler(get_wsgi_application())
        self._server = make_server(
            self.host,
            self.port,
            app,
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="admin-server", daemon=True
        )
        self._thread.start()
        logger.info("admin at http://%s:%d/admin/", self.host, self.port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
