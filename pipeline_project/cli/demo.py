"""`pipeline-project demo` (the main job in one command) and `pipeline-project bad-input` (malformed input at scale)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pipeline_project.cli.errors import fail
from pipeline_project.cli.stack import StateDir, console, make_stack, print_status
from pipeline_project.stack import StackError
from pipeline_project.stack.config import DEFAULT_SERVICES


def demo(
    source: Annotated[
        Path | None, typer.Option("--source", help="Upload your own files from DIR instead of the generated sample")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each phase")] = 1800.0,
    train_steps: Annotated[int, typer.Option(help="Cap on training steps (0 = train on everything new)")] = 40,
    seed: Annotated[
        int | None,
        typer.Option(help="Seed of the generated sample (default: from the clock, so each demo adds new text)"),
    ] = None,
    state_dir: StateDir = None,
) -> None:
    """The main job: stack up (Dagster included), upload a corpus to S3, let the sensor ingest it, train, summarize."""
    from pipeline_project.demo.runner import run_demo

    if source is not None and not source.is_dir():
        raise fail(StackError(f"--source {source} is not a directory"))
    try:
        stack = make_stack(state_dir)
        with console.status("starting the stack (Kafka x3, S3, MLflow, Dagster)...") as spinner:

            def progress(msg: str) -> None:
                console.log(msg)
                spinner.update(msg)

            stack.up([*DEFAULT_SERVICES, "dagster"], timeout=300, progress=progress)
        print_status(stack.status([*DEFAULT_SERVICES, "dagster"]))
        run_demo(source, timeout, stack, train_steps=train_steps, seed=seed)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None


def bad_input(
    directory: Annotated[Path, typer.Argument(help="Empty (or new) directory to write the files and expected.json to")],
    scale: Annotated[
        str,
        typer.Option(help="small: every class, caps scaled down (seconds); full: 200 MB line, 1M docs, 8 GiB bombs"),
    ] = "small",
    seed: Annotated[int, typer.Option(help="Seed of the generated content")] = 0,
) -> None:
    """Write malformed input in every class the readers quarantine or repair, with expected.json; then run
    `./scripts/demo.sh --source DIR` (full scale) and compare its "documents in" with expected records."""
    from rich.progress import Progress

    from pipeline_project.demo.bad_input.write import SCALES, write_bad_input

    if scale not in SCALES:
        raise fail(StackError(f"--scale {scale!r}: choose one of {', '.join(SCALES)}"))
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise fail(StackError(f"{directory} exists and is not an empty directory"))
    written = {"bytes": 0}
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"writing {scale}-scale bad input", total=None)

        def progress(cls, f, size):
            written["bytes"] += size
            bar.update(task, advance=1, description=f"{cls.name}: {f.path}")

        try:
            expected = write_bad_input(directory, scale=scale, seed=seed, progress=progress)
        except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
            raise fail(err) from None
    table = Table(title=f"bad input ({scale}) in {directory}")
    table.add_column("class", no_wrap=True)
    table.add_column("outcome at the readers", no_wrap=True)
    table.add_column("files", justify="right")
    files_per_class: dict[str, int] = {}
    for entry in expected["files"].values():
        files_per_class[entry["class"]] = files_per_class.get(entry["class"], 0) + 1
    for name, cls in expected["classes"].items():
        table.add_row(name, cls["outcome"], str(files_per_class.get(name, 0)))
    console.print(table)
    totals = expected["totals"]
    console.print(
        f"{totals['objects']} objects, {written['bytes'] / 1e6:,.1f} MB; the readers must yield {totals['records']:,} "
        f"records: {totals['kept']:,} documents, {sum(totals['quarantined'].values()):,} quarantined"
        + ("" if scale == "full" else f" (read with reader overrides {expected['reader']})")
    )
