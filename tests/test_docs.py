"""The README stays short, and every relative link of the README and docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def markdown_pages() -> list[Path]:
    """Return the README and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def prose(text: str) -> str:
    """Return `text` without fenced code blocks and code spans (links there are code)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def relative_links(text: str) -> list[str]:
    """Return the targets of the inline links of `text` that point into the repository."""
    targets = (m[1] for m in _LINK.finditer(prose(text)))
    return [t for t in targets if t and not _EXTERNAL.match(t)]


def slug(heading: str) -> str:
    """Return GitHub's anchor for a heading's text (code spans count by their text)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Return every heading anchor of a markdown page, duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for match in _HEADING.finditer(_FENCE.sub("", text)):
        base = slug(match[1])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_link(page: Path, target: str) -> str | None:
    """Return why `target`, linked from `page`, does not resolve (None when it does)."""
    path_part, _, anchor = target.partition("#")
    resolved = (page.parent / path_part).resolve() if path_part else page
    if not resolved.exists():
        return f"{target}: no such file {resolved}"
    if ROOT not in resolved.parents and resolved != ROOT:
        return f"{target}: outside the repository"
    if (
        anchor
        and resolved.suffix == ".md"
        and anchor not in anchors(resolved.read_text())
    ):
        return f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize(
    "page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_relative_link_resolves(page: Path) -> None:
    links = relative_links(page.read_text())
    broken = [why for t in links if (why := broken_link(page, t)) is not None]
    assert broken == []


def test_the_readme_links_into_docs() -> None:
    links = relative_links((ROOT / "README.md").read_text())
    assert any(link.startswith("docs/") for link in links)


def test_the_readme_is_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    page = ROOT / "docs" / "architecture.md"
    assert broken_link(page, "no-such-page.md") is not None
    assert broken_link(page, "coherence.md#no-such-heading") is not None
    assert broken_link(page, "coherence.md#the-guarantees") is None
    assert broken_link(page, "#the-path-of-a-save") is None
    assert broken_link(page, "../../etc/passwd") is not None


def test_links_in_code_are_not_links() -> None:
    text = (
        "see [a](a.md)\n```\n[b](b.md)\n```\nand `[c](c.md)` and [d](https://x.org/d)"
    )
    assert relative_links(text) == ["a.md"]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("## The two commands", "the-two-commands"),
        ("### `make run`", "make-run"),
        ("## Cache layers (`caches/layers/`)", "cache-layers-cacheslayers"),
        (
            "## One client per shard: the shard lock",
            "one-client-per-shard-the-shard-lock",
        ),
        ("## metric_samples", "metric_samples"),
    ],
)
def test_anchors_follow_githubs_slugs(heading: str, anchor: str) -> None:
    assert anchor in anchors(heading + "\n")


def test_repeated_headings_get_numbered_anchors() -> None:
    assert anchors("## Notes\n\n## Notes\n") == {"notes", "notes-1"}
