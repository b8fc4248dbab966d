"""docs/architecture.md's map of the tree names every folder of the package, the suite and the harness (and every
module at the package's root), and names nothing that is not there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOPS = ("pipeline_project", "pipeline_project_tests", "pipeline_project_harness")


def mapped_paths(text: str) -> set[str]:
    block = text.split("<!-- map -->", 1)[1].split("<!-- /map -->", 1)[0]
    found, top = set(), None
    for line in block.splitlines():
        match = re.match(r"^(\s*)(\S+)", line)
        if not match or match.group(2).startswith("```"):
            continue
        indent, name = match.groups()
        if not indent:
            top = name.rstrip("/")
            found.add(top)
        elif len(indent) == 2 and (name.endswith("/") or name.endswith(".py")):
            found.add(f"{top}/{name.rstrip('/')}")
    return found


def tree_paths() -> set[str]:
    found = set()
    for top in TOPS:
        found.add(top)
        for init in (REPO / top).rglob("__init__.py"):
            folder = init.parent.relative_to(REPO).as_posix()
            if folder != top and "__pycache__" not in folder:
                found.add(folder)
    found |= {f"pipeline_project/{p.name}" for p in (REPO / "pipeline_project").glob("*.py") if p.stem != "__init__"}
    return found


def test_the_map_names_every_folder_and_nothing_else():
    mapped = {p for p in mapped_paths((REPO / "docs" / "architecture.md").read_text()) if p.split("/")[0] in TOPS}
    tree = tree_paths()
    assert (sorted(tree - mapped), sorted(mapped - tree)) == ([], [])
