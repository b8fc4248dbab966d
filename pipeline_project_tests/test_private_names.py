"""No module of `pipeline_project` reaches into another's private names (issue 30 item 2).

A private name (`_x`) is imported from another project module, or read as `obj._x` off something that is not
`self` / `cls`: both tie a module to another's internals. Third-party internals used on purpose are listed with why.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pipeline_project"
CORE = ("pipeline_project.cleaning", "pipeline_project.streaming", "pipeline_project.training")  # no Dagster

# attribute reads of third-party internals, each with its reason
ALLOWED = {
    ("training/tracking/lineage.py", "_to_mlflow_entity"): "mlflow's Dataset has no public entity for log_inputs",
    ("training/checkpoint/store.py", "_reconstruct"): "numpy's pickle hook, named to torch's safe_globals allowlist",
}
PUBLIC_OWNERS = {"KafkaError"}  # librdkafka's local error codes are public, named with a leading underscore
PUBLIC_ATTRS = {"_replace", "_asdict", "_fields", "_make"}  # namedtuple's public methods


def violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline_project"):
            found += [f"{rel}:{node.lineno} imports {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            if node.value.id in ("self", "cls", *PUBLIC_OWNERS) or node.attr in PUBLIC_ATTRS:
                continue
            if (rel, node.attr) not in ALLOWED:
                found.append(f"{rel}:{node.lineno} reads {node.value.id}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_reads_another_modules_private_names():
    found = [v for path in sorted(ROOT.rglob("*.py")) for v in violations(path)]
    assert found == []


def overridden_private_hooks(package: str) -> list[str]:
    """Private methods a class redefines from a base class of another project module (reaching into its internals)."""
    found = []
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not isinstance(cls, type) or cls.__module__ != info.name:
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.startswith("pipeline_project") and base.__module__ != info.name:
                    found += [f"{info.name}.{cls.__name__}.{n} overrides {base.__module__}.{base.__name__}.{n}"
                              for n, v in vars(cls).items() if _private(n) and _method(v) and n in vars(base)]  # fmt: skip
    return found


def _method(value: object) -> bool:
    return inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property))


def test_no_class_overrides_private_hooks_of_another_modules_class():
    found = [v for package in CORE for v in overridden_private_hooks(package)]
    assert found == []
