"""The house rules of CONTRIBUTING.md that a machine can check: file and function size, what bench/ imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ROOT / "pipeline_project"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
REASON = "# long:"  # on the line above a def: why this function stays longer than MAX_FUNCTION_LINES


def _sources(root: Path) -> list[Path]:
    """The project's own files: not a hidden folder's (bench/.venv-datatrove, .cluster, ...)."""
    return sorted(p for p in root.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(root).parts))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _long_functions(path: Path) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        length = node.end_lineno - node.lineno + 1
        if length > MAX_FUNCTION_LINES and REASON not in lines[first - 2]:
            found.append(f"{_name(path)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_product_file_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _sources(PRODUCT) if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_no_product_function_is_over_60_lines_without_a_reason():
    found = [f for p in _sources(PRODUCT) for f in _long_functions(p)]
    assert found == [], f"split them, or say why above the def with `{REASON} <reason>`"


def test_the_checker_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\n\n# long: a table\ndef g():\n{body}\n")
    found = _long_functions(tmp_path / "m.py")
    assert len(found) == 1 and " f (" in found[0]


def test_ruff_limits_complexity():
    config = (ROOT / "pyproject.toml").read_text()
    select = re.search(r"^\[tool\.ruff\.lint\]\nselect = \[(.*?)\]", config, re.M | re.S)
    limit = re.search(r"^\[tool\.ruff\.lint\.mccabe\]\nmax-complexity = (\d+)", config, re.M)
    assert select and '"C90"' in select.group(1)
    assert limit and int(limit.group(1)) <= 15


def test_bench_imports_no_test_module():
    offenders = []
    for path in _sources(ROOT / "bench"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "pipeline_project_tests"]
    assert offenders == []
