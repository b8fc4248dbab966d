"""Every command of `pipeline-project` answers --help (exit 0, its own usage line and a description), and the
progress helpers give a rate and an ETA."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from pipeline_project.cli.app import app
from pipeline_project.common.progress import RateEta, format_duration


def _command_paths(typer_app: typer.Typer, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    click_group = typer.main.get_command(typer_app)
    paths = []

    def walk(command, path):
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(click_group, prefix)
    return paths


def test_every_command_has_help():
    paths = _command_paths(app)
    names = {" ".join(p) for p in paths}
    assert {"", "stack", "stack up", "stack down", "stack status", "demo", "doctor"} <= names, names
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], prog_name="pipeline-project")
        assert result.exit_code == 0, (path, result.output)
        usage = " ".join(("Usage: pipeline-project", *path))
        assert usage in " ".join(result.output.split()), (usage, result.output)
        body = result.output.split("Usage:", 1)[1].split("\n", 2)[-1]
        assert any(line.strip() and not line.strip().startswith(("╭", "│", "╰")) for line in body.splitlines()), (
            f"{' '.join(path) or 'pipeline-project'} has no description"
        )


def test_rate_and_eta_toward_a_total_and_of_a_shrinking_backlog():
    clock = [0.0]
    toward = RateEta("steps", total=40, clock=lambda: clock[0])
    assert toward.update(0) == "0/40 steps"
    clock[0] = 10.0
    assert toward.update(10) == "10/40 steps, 1.00 steps/s, ETA 30 s"
    backlog = RateEta("steps", backlog_unit="messages", clock=lambda: clock[0])
    backlog.update(0, remaining=100)
    clock[0] = 40.0
    assert backlog.update(40, remaining=40) == "40 steps, 1.33 steps/s, 40 messages left, ETA 20 s"
    assert format_duration(200) == "3 min 20 s" and format_duration(7500) == "2 h 05 min"
