"""`pipeline-project checkpoint pull`: a checkpoint of a lineage in S3, into a directory (`ops.checkpoints`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail

checkpoint_app = typer.Typer(
    help="Checkpoints in S3: pull one (the newest, or a step) into a directory; rewind a lineage to a step.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@checkpoint_app.command("pull")
def pull(
    directory: Annotated[Path, typer.Argument(help="New or empty directory to download into")],
    lineage: Annotated[
        str | None, typer.Option("--lineage", help="The lineage [default: the trainer's run_name, deepseek]")
    ] = None,
    step: Annotated[int | None, typer.Option("--step", help="This step instead of the newest")] = None,
) -> None:
    """Download a checkpoint (`hf/`: load with `AutoModelForCausalLM.from_pretrained(DIR/hf)`; `resume/`)."""
    from pipeline_project.ops.checkpoints import pull

    try:
        ref, lineage = pull(context.settings(), directory, lineage, step)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    files = [p for p in directory.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files) / 1e6
    typer.echo(f"pulled step {ref.step} of {lineage} ({ref.uri}) into {directory}: {len(files)} files, {size:,.1f} MB")


@checkpoint_app.command("rewind")
def rewind(
    step: Annotated[int, typer.Option("--step", help="The step whose checkpoint becomes the lineage's newest")],
    reason: Annotated[str, typer.Option("--reason", help="Why (written into each later checkpoint's REWOUND.json)")],
    lineage: Annotated[
        str | None, typer.Option("--lineage", help="The lineage [default: the trainer's run_name, deepseek]")
    ] = None,
) -> None:
    """Make an earlier checkpoint the lineage's newest: the next training run continues from it; later ones stay."""
    from pipeline_project.ops.checkpoints import rewind as rewind_lineage

    try:
        done, alias = rewind_lineage(context.settings(), lineage, step, reason)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    typer.echo(
        f"rewound {done.lineage} from step {done.rewound_from.step} to step {done.to.step} ({done.to.uri}); "
        f"{len(done.marked)} later checkpoint(s) kept and marked REWOUND.json; MLflow's latest-checkpoint: {alias}"
    )
