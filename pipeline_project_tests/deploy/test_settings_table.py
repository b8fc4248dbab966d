"""deploy/README.md has one table of every setting: each environment variable the package reads for its
configuration (settings.py, and the stack's ports through it) and each one the launchers set is listed."""

from __future__ import annotations

import re

from pipeline_project.defs.resources import launchers
from pipeline_project_tests.deploy.helpers import DEPLOY, REPO

ENV_NAME = r"[A-Z][A-Z0-9_]{2,}"


def _read_by_the_package() -> set[str]:
    settings = (REPO / "pipeline_project" / "settings.py").read_text()
    names = set(re.findall(rf"[\"']({ENV_NAME})[\"']", settings))
    stack = (REPO / "pipeline_project" / "stack" / "config.py").read_text()
    names |= set(re.findall(rf"_ports?_from_env\(\"({ENV_NAME})\"", stack))
    return names | {launchers.JOB_CONFIG_ENV, launchers.MLFLOW_TOKEN_ENV}


def _in_the_table() -> set[str]:
    text = (DEPLOY / "README.md").read_text()
    section = text.split("## One route for configuration", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for cell in first_cells for name in re.findall(rf"`({ENV_NAME})`", cell)}


def test_every_setting_is_in_the_table():
    missing = _read_by_the_package() - _in_the_table()
    assert not missing, f"deploy/README.md's settings table lacks {sorted(missing)}"


def test_the_table_names_the_trainer_launch_setting():
    assert {"PIPELINE_TRAINER_LAUNCH", "PIPELINE_TRAINER_JOB", "PGPASSWORD"} <= _in_the_table()
