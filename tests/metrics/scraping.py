"""Test helpers: scrape an endpoint, parse it, and read the Grafana dashboard's queries."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "tomori.json"
PROMETHEUS_UID = "tomori-prometheus"
POSTGRES_UID = "tomori-postgres"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "info": ("_info",),
}


def get(url: str, timeout: float = 5) -> tuple[int, str]:
    """Return (status, body) of a GET, whatever the status."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def parse(text: str) -> Samples:
    """Return every sample of an exposition text by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(base_url: str) -> Samples:
    """Scrape `base_url`/metrics and parse it (fails on a non-200)."""
    status, body = get(base_url + "/metrics")
    assert status == 200, body
    return parse(body)


def value(samples: Samples, name: str, **labels: str) -> float:
    """Return one sample's value (0 when absent)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str) -> float:
    """Return the sum of every sample called `name`, whatever its labels."""
    return sum(v for (n, _), v in samples.items() if n == name)


def exported_names(text: str) -> set[str]:
    """Return every series name the text exports, families with no sample included."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        suffixes = SUFFIXES.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
        names.update(sample.name for sample in family.samples)
    return names


def dashboard() -> dict[str, Any]:
    """Return the committed Grafana dashboard."""
    return json.loads(DASHBOARD.read_text())


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for child in node.values():
            yield from _walk(child)
    elif isinstance(node, list):
        for child in node:
            yield from _walk(child)


def _uid(node: dict[str, Any]) -> str | None:
    source = node.get("datasource")
    return source.get("uid") if isinstance(source, dict) else None


def prometheus_exprs() -> list[str]:
    """Return every PromQL expression of the dashboard (targets and variables)."""
    exprs = [n["expr"] for n in _walk(dashboard()) if isinstance(n.get("expr"), str)]
    for variable in dashboard()["templating"]["list"]:
        if _uid(variable) == PROMETHEUS_UID:
            exprs.append(variable["definition"])
    return exprs


def sql_queries() -> list[tuple[str, str]]:
    """Return (format, SQL) of every PostgreSQL query: panels, annotations, variables."""
    queries = [
        (node.get("format", "time_series"), node["rawSql"])
        for node in _walk(dashboard())
        if isinstance(node.get("rawSql"), str)
    ]
    for variable in dashboard()["templating"]["list"]:
        if _uid(variable) == POSTGRES_UID:
            queries.append(("variable", variable["query"]))
    return queries


_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}


def promql_metric_names(expr: str) -> set[str]:
    """Return the metric names a PromQL expression (or label_values()) reads."""
    variable = re.fullmatch(r"\s*label_values\(\s*([\w:]+)\s*,\s*\w+\s*\)\s*", expr)
    if variable:
        return {variable.group(1)}
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)\s*(\()?", text):
        name, call = match.groups()
        if call is None and name.lower() not in _KEYWORDS:
            names.add(name)
    return names
