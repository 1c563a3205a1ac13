"""A scriptable OpenRouter stand-in on loopback, for tests, the demo and the simulator.

It serves the four catalog endpoints under `/api/v1` with aiohttp. Per catalog
a script sets the answer (status, JSON or raw body, server-side delay), can
hold requests until released, and counts what arrived. It runs on the caller's
event loop; `python -m caches.catalogs.fake_server --port 8089` runs it alone
with the sample catalogs.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from caches.catalogs.endpoints import CATALOG_NAMES, CATALOG_PATHS
from caches.catalogs.samples import sample_catalogs

API_PREFIX = "/api/v1"
_UNSET: Any = object()


@dataclass
class EndpointScript:
    """How one catalog endpoint answers, and what it has seen."""

    status: int = 200
    body: bytes = b'{"data": []}'
    content_type: str = "application/json"
    delay: float = 0.0
    held: asyncio.Event | None = None  # set = released
    requests: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake answered."""

    catalog: str
    path: str
    authorization: str | None


class FakeOpenRouter:
    """An aiohttp server on 127.0.0.1 answering the catalog endpoints as scripted."""

    def __init__(
        self,
        *,
        catalogs: dict[str, list[dict[str, Any]]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self._scripts = {name: EndpointScript() for name in CATALOG_NAMES}
        self._models: dict[str, list[dict[str, Any]]] = {
            name: [] for name in CATALOG_NAMES
        }
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        for name, models in (catalogs or {}).items():
            self.publish(name, models)

    @property
    def base_url(self) -> str:
        """Return the API base to give a CatalogSet, e.g. `http://127.0.0.1:PORT/api/v1`."""
        return f"http://{self.host}:{self.port}{API_PREFIX}"

    async def start(self) -> str:
        """Start listening (port 0 picks a free one) and return the base URL."""
        app = web.Application()
        app.router.add_get(API_PREFIX + "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self.base_url

    async def stop(self) -> None:
        """Release held requests and shut the server down."""
        self._stopping.set()
        for script in self._scripts.values():
            if script.held is not None:
                script.held.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenRouter:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # Scripting.

    def publish(self, catalog: str, models: list[dict[str, Any]]) -> None:
        """Answer 200 with `{"data": models}` from now on."""
        self._models[catalog] = copy.deepcopy(models)
        self.respond(catalog, json_body={"data": self._models[catalog]})

    def add_model(self, catalog: str, model: dict[str, Any]) -> None:
        """Publish one more model in `catalog` (a model OpenRouter released just now)."""
        self.publish(catalog, [*self._models[catalog], model])

    def respond(
        self,
        catalog: str,
        *,
        status: int = 200,
        json_body: Any = _UNSET,
        body: str | bytes | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer with `status` and a JSON value or raw body (default: an error object)."""
        script = self._scripts[catalog]
        if body is not None:
            raw = body.encode() if isinstance(body, str) else body
        elif json_body is not _UNSET:
            raw = json.dumps(json_body).encode()
        else:
            raw = json.dumps(
                {"error": {"code": status, "message": "scripted"}}
            ).encode()
        script.status, script.body, script.delay = status, raw, delay

    def hold(self, catalog: str) -> None:
        """Make requests to `catalog` wait until release() (or stop())."""
        self._scripts[catalog].held = asyncio.Event()

    def release(self, catalog: str) -> None:
        """Let held requests to `catalog` be answered, and stop holding new ones."""
        held, self._scripts[catalog].held = self._scripts[catalog].held, None
        if held is not None:
            held.set()

    def request_count(self, catalog: str) -> int:
        """Return how many requests `catalog` has received."""
        return self._scripts[catalog].requests

    async def wait_for_requests(
        self, catalog: str, count: int = 1, timeout: float = 5.0
    ) -> None:
        """Wait until `catalog` has received `count` requests (`timeout` only guards hangs)."""
        script = self._scripts[catalog]
        async with asyncio.timeout(timeout):
            while script.requests < count:
                script.arrived.clear()
                await script.arrived.wait()

    # Serving.

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"].rstrip("/")
        catalog = next((n for n, p in CATALOG_PATHS.items() if p == path), None)
        if catalog is None:
            return web.json_response(
                {"error": {"code": 404, "message": "not found"}}, status=404
            )
        script = self._scripts[catalog]
        script.requests += 1
        self.requests.append(
            RecordedRequest(catalog, request.path, request.headers.get("Authorization"))
        )
        script.arrived.set()
        status, body, content_type = script.status, script.body, script.content_type
        await self._wait(script)
        return web.Response(status=status, body=body, content_type=content_type)

    async def _wait(self, script: EndpointScript) -> None:
        if script.held is not None:
            await script.held.wait()
        if script.delay > 0:
            # The delay is the server being slow; stop() cuts it short.
            try:
                async with asyncio.timeout(script.delay):
                    await self._stopping.wait()
            except TimeoutError:
                pass


async def _serve_forever(port: int) -> None:
    async with FakeOpenRouter(catalogs=sample_catalogs(), port=port) as server:
        print(f"fake OpenRouter at {server.base_url}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8089)
    asyncio.run(_serve_forever(parser.parse_args().port))
