"""The README stays a one-page guide, and every relative link in it and in docs/ points to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


def _broken(doc: Path) -> list[str]:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    return broken


def test_every_relative_link_resolves():
    broken = {str(doc.relative_to(REPO)): _broken(doc) for doc in _documents()}
    assert not {doc: links for doc, links in broken.items() if links}


def test_the_readme_is_one_page():
    assert len((REPO / "README.md").read_text().splitlines()) <= 150


def test_every_benchmark_file_is_dated_and_indexed():
    folder = REPO / "docs" / "benchmarks"
    files = sorted(p.name for p in folder.glob("*.md") if p.name != "README.md")
    assert files, "no benchmark files"
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", name) for name in files), files
    index = (folder / "README.md").read_text()
    assert [name for name in files if f"]({name})" not in index] == []
