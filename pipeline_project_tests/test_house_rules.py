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


# The floors of pipeline_project/, bottom first: a unit imports units of lower floors only (docs/architecture.md).
# `stack/` (the local services) needs only the settings; `cluster/` and `demo/` are dev tooling over everything.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("common",),
    ("settings",),
    ("ingest", "stack"),
    ("cleaning",),
    ("streaming",),
    ("training",),
    ("provenance",),
    ("defs",),
    ("definitions", "ops"),
    ("cluster", "demo"),
    ("cli",),
)
ROOT_MODULES = {"__init__", "settings", "definitions"}  # at most one more may join them
DAGSTER_PACKAGES = {"dagster", "dagster_aws", "dagster_k8s", "dagster_postgres", "dagster_graphql", "dagster_webserver"}
DAGSTER_UNITS = {"defs", "definitions", "demo"}  # the Dagster layer, its wiring point, and the demo that launches it


def module_name(package: Path, path: Path) -> str:
    parts = (package.name, *path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, list[tuple[str, int]]]:
    """{module: [(imported name, line)]} of every import in the package, lazy ones (inside functions) included;
    names of the package resolve to the module that holds them."""
    modules = {module_name(package, p): p for p in _sources(package)}
    graph: dict[str, list[tuple[str, int]]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        found = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(a.name, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                found += [
                    (f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, node.lineno) for a in node.names
                ]
        graph[name] = [(_resolve(imported, modules), line) for imported, line in found]
    return graph


def _resolve(name: str, modules) -> str:
    while name and name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _unit(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def layering_violations(package: Path) -> list[str]:
    """Imports that go up a floor or sideways between units, Dagster outside its layer, anything importing cli/."""
    floor = {unit: i for i, units in enumerate(LAYERS) for unit in units}
    own = package.name
    found = []
    for module, imports in import_graph(package).items():
        unit = _unit(module)
        for imported, line in imports:
            top = imported.split(".")[0]
            where = f"{module}:{line} imports {imported}"
            if top in DAGSTER_PACKAGES and unit not in DAGSTER_UNITS:
                found.append(f"{where}: Dagster outside {sorted(DAGSTER_UNITS)}")
            if top != own or _unit(imported) in (unit, "__init__"):
                continue
            target = _unit(imported)
            if target == "cli":
                found.append(f"{where}: nothing imports the command line")
            elif unit not in floor or target not in floor:
                found.append(f"{where}: {unit if unit not in floor else target} has no floor in LAYERS")
            elif floor[target] >= floor[unit]:
                found.append(f"{where}: {target} is not on a lower floor than {unit}")
    return found


def cycles(package: Path) -> list[list[str]]:
    """Circles of imports: between modules, and between the rooms (files and folders) of any one folder."""
    graph = import_graph(package)
    modules = set(graph)
    edges = {(m, i) for m, imports in graph.items() for i, _ in imports if i in modules and i != m}
    rooms: set[tuple[str, str]] = set()
    for a, b in edges:
        pa, pb = a.split("."), b.split(".")
        common = next((k for k in range(min(len(pa), len(pb))) if pa[k] != pb[k]), min(len(pa), len(pb)))
        room_a = ".".join(pa[: common + 1]) if len(pa) > common else f"{a}.__init__"
        room_b = ".".join(pb[: common + 1]) if len(pb) > common else f"{b}.__init__"
        rooms.add((room_a, room_b))
    found = _circles(edges)
    return found + [c for c in _circles(rooms) if c not in found]


def _circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    adjacent: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        adjacent.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in adjacent.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(adjacent):
        if node not in index:
            visit(node)
    return found


def prefixed_siblings(package: Path) -> list[str]:
    """Modules named `<x>_<y>.py` beside a module or folder `<x>`, or two or more sharing a prefix `<x>_`: a big
    module becomes a folder, not a prefixed sibling."""
    found = []
    for folder in sorted({p.parent for p in _sources(package)}):
        rooms = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
        rooms += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
        by_prefix: dict[str, list[str]] = {}
        for name in rooms:
            if "_" in name.strip("_"):
                by_prefix.setdefault(name.split("_")[0], []).append(name)
        for prefix, names in sorted(by_prefix.items()):
            if prefix in rooms or len(names) > 1:
                found.append(f"{folder.relative_to(package.parent)}: {', '.join(sorted(names))} beside {prefix}")
    return found


def test_every_import_goes_down_the_floors():
    assert layering_violations(PRODUCT) == []


def test_no_import_cycles_between_modules_or_rooms():
    assert cycles(PRODUCT) == []


def test_the_package_root_holds_few_modules():
    root = {p.stem for p in PRODUCT.glob("*.py")}
    assert root >= ROOT_MODULES and len(root - ROOT_MODULES) <= 1, sorted(root)
    assert {p.name for p in PRODUCT.iterdir() if (p / "__init__.py").is_file()} <= {u for f in LAYERS for u in f}


def test_a_big_module_becomes_a_folder_not_a_prefixed_sibling():
    assert prefixed_siblings(PRODUCT) == []


def test_fmt_skip_only_on_literal_tables():
    found = []
    for path in _sources(PRODUCT):
        text = path.read_text()
        skipped = {i + 1 for i, line in enumerate(text.splitlines()) if line.rstrip().endswith("# fmt: skip")}
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.stmt) and node.end_lineno in skipped and not _literal_table(node):
                found.append(f"{_name(path)}:{node.end_lineno}")
    assert found == [], "let the formatter lay it out (or split the function); skip it only on literal tables"


def _literal_table(node: ast.stmt) -> bool:
    value = getattr(node, "value", None)
    return isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(value, (ast.Tuple, ast.List, ast.Dict, ast.Set))


def test_the_checkers_see_each_broken_rule(tmp_path):
    pkg = tmp_path / "pipeline_project"
    files = {
        "__init__.py": "",
        "settings.py": "",
        "common/__init__.py": "",
        "common/a.py": "from pipeline_project.common import b\n",
        "common/b.py": "def f():\n    from pipeline_project.common import a\n",  # a lazy import closes the circle
        "cleaning/__init__.py": "",
        "cleaning/x.py": "import dagster\nfrom pipeline_project.training import y\n",
        "training/__init__.py": "",
        "training/y.py": "from pipeline_project.cli import app\n",
        "training/y_more.py": "",
        "cli/__init__.py": "",
        "cli/app.py": "",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    found = layering_violations(pkg)
    assert any("Dagster outside" in v for v in found)
    assert any("training is not on a lower floor than cleaning" in v for v in found)
    assert any("nothing imports the command line" in v for v in found)
    assert cycles(pkg) == [["pipeline_project.common.a", "pipeline_project.common.b"]]
    assert prefixed_siblings(pkg) == ["pipeline_project/training: y_more beside y"]
