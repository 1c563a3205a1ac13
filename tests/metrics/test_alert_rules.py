"""The alerting rules: promtool checks them and runs their unit tests; each has a runbook section."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.metrics.alert_rules import (
    ALERTS,
    RULE_TESTS,
    RUNBOOK,
    alerts,
    promtool,
    rule_test_cases,
    runbook_sections,
)

#: Alerts issue 32 asks for, one or more per signal.
REQUIRED = {
    "TomoriWorkerDown",
    "TomoriWorkerNotReady",
    "TomoriGatewayDisconnected",
    "TomoriBusDisconnected",
    "TomoriBusPublishBacklogGrowing",
    "TomoriOutboxFollowerFailing",
    "TomoriOutboxGapsOpen",
    "TomoriInvalidationLagHigh",
    "TomoriConsistencyInconsistent",
    "TomoriMemoryCritical",
    "TomoriEmergencyClears",
    "TomoriDatabaseBreakerOpen",
    "TomoriCatalogStale",
    "TomoriMetricSamplesFailing",
}


def test_promtool_accepts_the_rules_file() -> None:
    result = promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_every_promtool_unit_test_passes() -> None:
    assert RULE_TESTS, "no deploy/prometheus/tests/*.yaml"
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(RULE_TESTS), result.stdout


def test_the_unit_tests_fail_when_a_rule_changes(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    for path in RULE_TESTS:
        shutil.copy(path, tmp_path / "tests" / path.name)
    text = ALERTS.read_text()
    assert text.count("for: 2m") >= 1
    (tmp_path / "alerts.yaml").write_text(text.replace("for: 2m", "for: 10m"))
    result = promtool(
        "test", "rules", *(p.name for p in RULE_TESTS), cwd=tmp_path / "tests"
    )
    assert result.returncode != 0
    assert "TomoriWorkerDown" in result.stdout + result.stderr


def test_every_required_alert_exists_with_firing_and_quiet_cases() -> None:
    names = {alert.name for alert in alerts()}
    assert names >= REQUIRED, REQUIRED - names
    cases = rule_test_cases()
    for name in names:
        assert cases.get(name) == {True, False}, f"{name}: cases {cases.get(name)}"


def test_every_alert_links_a_runbook_section_that_says_what_to_do() -> None:
    sections = runbook_sections()
    for alert in alerts():
        page, _, anchor = alert.runbook_url.partition("#")
        assert page == "docs/runbook.md", alert
        assert anchor in sections, f"{alert.name}: no section #{anchor}"
        body = sections[anchor].lower()
        for part in ("what it means", "what to look at", "what to do"):
            assert part in body, f"{alert.name}: its section lacks {part!r}"


def test_the_runbook_has_the_operator_procedures() -> None:
    sections = runbook_sections()
    for command in ("emergency_clear", "invalidate_cache"):
        assert command in sections, f"no section #{command}"
        assert f"manage.py {command}" in sections[command], command


def test_the_rule_reader_sees_block_expressions() -> None:
    text = (
        "  - alert: A\n    expr: |\n            x\n              > y\n    for: 1m\n"
        "    annotations:\n      runbook_url: docs/runbook.md#a\n"
        "  - alert: B\n    expr: up == 0\n    annotations:\n"
        "      runbook_url: docs/runbook.md#b\n"
    )
    assert [(a.name, a.expr, a.runbook_url) for a in alerts(text)] == [
        ("A", "x > y", "docs/runbook.md#a"),
        ("B", "up == 0", "docs/runbook.md#b"),
    ]


def test_the_scrape_examples_are_valid_and_the_first_targets_make_run() -> None:
    from tests.metrics.prometheus_server import SHIPPED_CONFIG, SHIPPED_TARGET
    from tomori.devenv import DEFAULT_METRICS_PORT
    from tomori.domain.knobs import KNOBS_BY_NAME

    address = KNOBS_BY_NAME["METRICS_ADDRESS"].default
    assert f"{address}:{DEFAULT_METRICS_PORT}" == SHIPPED_TARGET
    shards = SHIPPED_CONFIG.with_name("scrape-tomori-shards.yaml")
    for config in (SHIPPED_CONFIG, shards):
        result = promtool("check", "config", str(config))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS: 1 rule files found" in result.stdout, config
    assert shards.read_text().count(":9108") >= 2  # one port per process per host


def test_every_link_inside_the_runbook_resolves() -> None:
    sections = runbook_sections()
    links = re.findall(r"\]\(#([^)]+)\)", RUNBOOK.read_text())
    assert links and set(links) <= sections.keys(), set(links) - sections.keys()
