"""Test helpers: the alerting rules, their promtool tests, the runbook and Debian's Prometheus.

The rules file is read line by line over its fixed layout (`- alert:`,
then `expr:`, then `runbook_url:`) rather than with a YAML library:
the project has no YAML dependency, and promtool (run by the tests) is what
validates the YAML itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "deploy" / "prometheus"
ALERTS = RULES_DIR / "alerts.yaml"
RULE_TESTS = sorted((RULES_DIR / "tests").glob("*.yaml"))
RUNBOOK = ROOT / "docs" / "runbook.md"
INSTALL_HINT = (
    "install Debian's prometheus package: `make prometheus` (as `make test` does)"
)


@dataclass(frozen=True)
class Alert:
    """One alerting rule as the rules file states it."""

    name: str
    expr: str
    runbook_url: str


def binary(name: str) -> str:
    """Return the path of `promtool` or `prometheus`; fail naming how to install it."""
    path = shutil.which(name)
    assert path, f"{name} not found: {INSTALL_HINT}"
    return path


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run promtool with `args` (bounded), returning its result."""
    return subprocess.run(
        [binary("promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _field(lines: list[str], key: str) -> str:
    """Return a rule's `key:` value, a block scalar (`|`) joined into one line."""
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith(key + ":"):
            continue
        value = stripped.removeprefix(key + ":").strip()
        if value != "|":
            return value
        indent = len(line) - len(line.lstrip())
        block = []
        for more in lines[index + 1 :]:
            if more.strip() and len(more) - len(more.lstrip()) <= indent:
                break
            block.append(more.strip())
        return " ".join(part for part in block if part)
    raise AssertionError(f"no {key}: in\n" + "\n".join(lines))


def alerts(text: str | None = None) -> list[Alert]:
    """Return every alerting rule of the rules file (or of `text`)."""
    text = ALERTS.read_text() if text is None else text
    chunks = re.split(r"^\s*- alert: ", text, flags=re.MULTILINE)[1:]
    found = []
    for chunk in chunks:
        name, *lines = chunk.splitlines()
        runbook_url = _field(lines, "runbook_url")
        found.append(Alert(name.strip(), _field(lines, "expr"), runbook_url))
    return found


_CASE = re.compile(
    r"alertname: (?P<name>\w+)\n\s*exp_alerts:(?P<empty> \[\])?", re.MULTILINE
)


def rule_test_cases() -> dict[str, set[bool]]:
    """Return, per alert name, which kinds of case the promtool tests hold (True: firing)."""
    cases: dict[str, set[bool]] = {}
    for path in RULE_TESTS:
        for match in _CASE.finditer(path.read_text()):
            cases.setdefault(match.group("name"), set()).add(not match.group("empty"))
    return cases


def github_anchor(heading: str) -> str:
    """Return the anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """Return the runbook's sections (level 2 and 3) by anchor, with their text."""
    sections: dict[str, str] = {}
    anchor = None
    for line in RUNBOOK.read_text().splitlines():
        heading = re.match(r"#{2,3} (.+)", line)
        if heading:
            anchor = github_anchor(heading.group(1))
            assert anchor not in sections, f"two sections make #{anchor}"
            sections[anchor] = ""
        elif anchor is not None:
            sections[anchor] += line + "\n"
    return sections
