"""A real Prometheus (Debian's package) on loopback for a test: own port, own storage, bounded life."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from tests.metrics.alert_rules import ALERTS, RULES_DIR, binary
from tests.metrics.scraping import get
from tests.support.faults import free_port, wait_until

SHIPPED_CONFIG = RULES_DIR / "scrape-tomori.yaml"
#: The target `make run`'s worker serves (tomori/devenv.py: DEFAULT_METRICS_PORT).
SHIPPED_TARGET = "127.0.0.1:9108"
#: Longest a test's Prometheus may live, whatever happens to the test process.
LIFETIME_SECONDS = 600


def config_for(target: str, *, interval_seconds: int = 1) -> str:
    """Return the shipped scrape config aimed at `target`, scraping every `interval_seconds`."""
    text = SHIPPED_CONFIG.read_text()
    assert f'"{SHIPPED_TARGET}"' in text, (
        "the shipped config no longer targets make run"
    )
    text = text.replace(f'"{SHIPPED_TARGET}"', f'"{target}"')
    for key in ("scrape_interval", "evaluation_interval"):
        assert f"{key}: 15s" in text, key
        text = text.replace(f"{key}: 15s", f"{key}: {interval_seconds}s")
    return text


class PrometheusServer:
    """`prometheus` run on 127.0.0.1 with a config and the alerting rules in `workdir`."""

    def __init__(self, config: str, workdir: Path) -> None:
        self.workdir = workdir
        (workdir / "scrape-tomori.yaml").write_text(config)
        shutil.copy(ALERTS, workdir / ALERTS.name)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                "timeout",
                "--kill-after=5",
                str(LIFETIME_SECONDS),
                binary("prometheus"),
                f"--config.file={workdir / 'scrape-tomori.yaml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: `timeout` and prometheus
        )

    def wait_ready(self, timeout: float = 60) -> None:
        """Return once /-/ready answers 200; fail with Prometheus' log otherwise."""
        ready = wait_until(self._ready, timeout=timeout, interval=0.2)
        assert ready, self.output()

    def _ready(self) -> bool:
        assert self.proc.poll() is None, f"prometheus exited:\n{self.output()}"
        try:
            return get(self.url + "/-/ready", timeout=2)[0] == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """Return the `data` of a GET on the HTTP API; fail on an error status."""
        query = urllib.parse.urlencode(params)
        status, body = get(f"{self.url}/api/v1/{path}?{query}", timeout=10)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", (params, answer)
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Return the instant vector `expr` evaluates to now."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        result: list[dict[str, Any]] = data["result"]
        return result

    def output(self) -> str:
        """Return what Prometheus logged so far."""
        self.log.flush()
        return (self.workdir / "prometheus.log").read_text()

    def stop(self) -> None:
        """Stop Prometheus (SIGTERM, then SIGKILL) and close its log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()
