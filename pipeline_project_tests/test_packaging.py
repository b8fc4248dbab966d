"""Packaging: requirements.lock agrees with pyproject.toml's ranges, and the trainer's entrypoint imports no Dagster.

The lock is what scripts/setup.sh, .ci/run and the images install from (`-c requirements.lock`); a range changed in
pyproject.toml without re-running scripts/lock.sh would leave them installing versions outside it, or nothing for a new
dependency. The fresh-venv check of `.[trainer]` is in .ci/run (minutes); this file is the fast part.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PROJECT = "pipeline-project"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")
_VIA_PROJECT = f"{PROJECT} (pyproject.toml)"


def direct_requirements(pyproject: dict) -> list[Requirement]:
    """The base dependencies and every extra's, without the extras that name the project itself."""
    project = pyproject["project"]
    lines = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        lines.extend(extra)
    reqs = [Requirement(line) for line in lines]
    return [r for r in reqs if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def locked(lock_text: str) -> tuple[dict[str, list[Version]], set[str]]:
    """Each pinned name's versions (a universal lock may pin one name per marker), and the names pinned
    because pyproject.toml asked for them (uv's `# via pipeline-project (pyproject.toml)`)."""
    pins: dict[str, list[Version]] = {}
    direct: set[str] = set()
    current = None
    for line in lock_text.splitlines():
        match = _PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            pins.setdefault(current, []).append(Version(match.group(2)))
        elif current and _VIA_PROJECT in line:
            direct.add(current)
    return pins, direct


def disagreements(reqs: Iterable[Requirement], lock_text: str) -> list[str]:
    """One line for each way the lock and the ranges disagree; empty when the lock is current."""
    pins, direct = locked(lock_text)
    wanted = {canonicalize_name(r.name) for r in reqs}
    problems = []
    for req in reqs:
        name = canonicalize_name(req.name)
        versions = pins.get(name)
        if not versions:
            problems.append(f"{req}: not in the lock")
            continue
        problems += [f"{req}: the lock pins {v}" for v in versions if not req.specifier.contains(v, prereleases=True)]
    problems += [f"{name}: locked for pyproject.toml, which no longer asks for it" for name in sorted(direct - wanted)]
    return problems


def test_the_lock_agrees_with_the_ranges_of_pyproject():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    problems = disagreements(direct_requirements(pyproject), (REPO / "requirements.lock").read_text())
    assert not problems, "requirements.lock is stale; run scripts/lock.sh:\n" + "\n".join(problems)


STALE_LOCK = """\
numpy==1.26.4
    # via pipeline-project (pyproject.toml)
numpy==2.4.6 ; python_full_version >= '3.11'
    # via
    #   pipeline-project (pyproject.toml)
    #   pandas
left-over==1.0
    # via pipeline-project (pyproject.toml)
pandas==3.1.1
    # via mlflow
"""


def test_a_stale_lock_is_named_line_by_line():
    reqs = [Requirement("numpy>=2,<3"), Requirement("torch>=2.9"), Requirement("pandas>=2")]
    assert disagreements(reqs, STALE_LOCK) == [
        "numpy<3,>=2: the lock pins 1.26.4",
        "torch>=2.9: not in the lock",
        "left-over: locked for pyproject.toml, which no longer asks for it",
    ]


_NO_DAGSTER = textwrap.dedent(
    """
    import importlib.abc, runpy, sys

    class NoDagster(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"dagster", "dagster_webserver", "dagster_graphql", "dagster_aws", "dagster_k8s"}:
                raise ImportError(f"the trainer must not import {name}")

    sys.meta_path.insert(0, NoDagster())
    import pipeline_project.training.run, pipeline_project.training.distributed  # what main imports to train
    sys.argv = ["pipeline-train", "--help"]
    runpy.run_module("pipeline_project.training.entrypoint", run_name="__main__")
    """
)


@pytest.mark.timeout(120)
def test_the_trainer_entrypoint_runs_without_dagster():
    """The trainer's whole import chain (run_job, the loader, MLflow logging) loads with Dagster unimportable
    (dagster-pipes is the trainer's own dependency). .ci/run proves the same in a fresh `.[trainer]` venv."""
    done = subprocess.run([sys.executable, "-c", _NO_DAGSTER], capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--config-env" in done.stdout


IMAGES = REPO / "deploy" / "images"


@pytest.mark.parametrize("image", ["trainer", "user-code"])
def test_the_images_install_the_locked_versions(image):
    dockerfile = (IMAGES / f"{image}.Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if line.startswith("RUN") and "pip install" in line]
    assert installs and all("-c requirements.lock" in line for line in installs), installs
    assert "!requirements.lock" in (IMAGES / f"{image}.Dockerfile.dockerignore").read_text().splitlines()


def test_the_trainer_image_holds_the_trainer_extra_only():
    """The trainer pod's image: [trainer] by default; the compose GPU override, which serves Dagster from it,
    asks for the rest by build argument."""
    import yaml

    assert "ARG EXTRAS=trainer\n" in (IMAGES / "trainer.Dockerfile").read_text()
    gpu = yaml.safe_load((REPO / "deploy" / "compose" / "compose.gpu.yaml").read_text())
    assert gpu["services"]["user-code"]["build"]["args"] == {"EXTRAS": "trainer,stack"}


def test_the_wheel_holds_the_package_alone(tmp_path):
    """Built from a copy of the checkout (the suite and the harness beside the package, as here): the wheel's
    top-level packages are `pipeline_project` only, and its console scripts point into it."""
    import shutil
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("pipeline_project", "pipeline_project_tests", "pipeline_project_harness"):
        shutil.copytree(REPO / package, src / package, ignore=ignore)
    build = "from setuptools import build_meta; print(build_meta.build_wheel('dist'))"
    done = subprocess.run([sys.executable, "-c", build], cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = src / "dist" / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"pipeline_project"}, sorted(tops)
    assert "pipeline_project/cleaning/steps/gopher.py" in names and "pipeline_project/py.typed" in names
    assert (
        "pipeline_project.cli.app:app" in entry_points and "pipeline_project.training.entrypoint:main" in entry_points
    )
