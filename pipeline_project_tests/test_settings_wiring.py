"""`Settings()` (the environment) is read where the program is wired, and handed down (issue 30 item 2)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pipeline_project"

WIRING = {
    "cli/context.py",  # every command's settings
    "definitions.py",  # the resources of the one Definitions
    "defs/jobs.py",  # the job tags of the one Definitions
    "defs/resources/__init__.py",  # build_resources: the resources of the one Definitions (sensors and assets get them)
    "stack/config.py",  # StackConfig: the local stack's own settings object, built by the stack CLI
}


def builders(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "Settings"
        and not n.args
        and not n.keywords
    ]


def test_settings_are_built_only_where_the_program_is_wired():
    found = {
        rel: lines
        for path in sorted(ROOT.rglob("*.py"))
        if (rel := path.relative_to(ROOT).as_posix()) not in WIRING and (lines := builders(path))
    }
    assert found == {}
