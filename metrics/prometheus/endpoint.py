"""A worker's HTTP endpoint: /metrics, /healthz and /readyz, served from a daemon thread.

A thread, not the event loop: a scrape or a probe must answer while the loop
is busy or stuck (the liveness probe is how a stuck loop gets noticed).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from caches.core import finite_json
from metrics.prometheus.health import Verdict, WorkerHealth

logger = logging.getLogger(__name__)

StartResponse = Callable[..., Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        logger.debug("metrics endpoint %s", format % args)


def _json(start_response: StartResponse, verdict: Verdict) -> list[bytes]:
    ok, body = verdict
    payload = finite_json.dumps(body, sort_keys=True).encode()
    status = "200 OK" if ok else "503 Service Unavailable"
    start_response(
        status,
        [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
    )
    return [payload]


def make_app(
    registry: CollectorRegistry, health: WorkerHealth
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """Return the WSGI app serving /metrics, /healthz and /readyz (404 elsewhere)."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            return _json(start_response, health.liveness())
        if path == "/readyz":
            return _json(start_response, health.readiness())
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics, /healthz or /readyz\n"]

    return app


class MetricsEndpoint:
    """The endpoint's server and thread; `start()` returns the bound port."""

    def __init__(self, app: Any, *, address: str, port: int) -> None:
        self.app = app
        self.address = address
        self.port = port
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind and serve in a daemon thread; raise OSError if the port is taken."""
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        server_class = type(
            "Server", (ThreadingWSGIServer,), {"address_family": family}
        )
        self._server = make_server(
            self.address, self.port, self.app, server_class, _QuietHandler
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-endpoint", daemon=True
        )
        self._thread.start()
        return self.port

    @property
    def url(self) -> str:
        """Return the endpoint's base URL."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
