"""No import cycles between the project's packages, across the trees too.

import-linter's acyclic_siblings contract (pyproject.toml) sees cycles among
the children of one package; this also catches a cycle that leaves its tree
and comes back (caches.bus -> metrics.prometheus -> caches.bus). Modules are
grouped by their first ``depth`` name parts, for every depth from 2 down.

The top level is not checked: ``tomori`` holds both the domain the caches read
(models, repositories, knobs) and the entry points that use the caches (the
bot, the admin, the commands), so ``caches`` and ``tomori`` import each other.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import grimp
import pytest

ROOTS = ("caches", "metrics", "tomori")
MAX_DEPTH = 6


@pytest.fixture(scope="module")
def imports() -> list[tuple[str, str]]:
    """Return every (importer, imported) pair between the project's modules."""
    graph = grimp.build_graph(*ROOTS)
    return [
        (importer, imported)
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported.split(".")[0] in ROOTS
    ]


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Return the strongly connected groups of more than one node (Tarjan)."""
    successors: dict[str, set[str]] = defaultdict(set)
    for importer, imported in edges:
        successors[importer].add(imported)
        successors.setdefault(imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in successors[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(successors):
        if node not in index:
            visit(node)
    return groups


def grouped(edges: Iterable[tuple[str, str]], depth: int) -> list[tuple[str, str]]:
    """Return the edges between distinct modules cut to ``depth`` name parts."""
    cut = []
    for importer, imported in edges:
        a, b = importer.split("."), imported.split(".")
        if len(a) >= depth and len(b) >= depth and a[:depth] != b[:depth]:
            cut.append((".".join(a[:depth]), ".".join(b[:depth])))
    return cut


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = [("a.x", "a.y"), ("a.y", "b.z"), ("b.z", "a.x"), ("a.x", "c")]
    assert cycles(grouped(edges, 2)) == [["a.x", "a.y", "b.z"]]


@pytest.mark.parametrize("depth", range(2, MAX_DEPTH + 1))
def test_no_import_cycles_between_packages(
    imports: list[tuple[str, str]], depth: int
) -> None:
    assert cycles(grouped(imports, depth)) == []
