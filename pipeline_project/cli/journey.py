"""The user's journey after `demo`: `pipeline-project status` (where the work stands), `pipeline-project checkpoint
pull` (the model in hand) and `pipeline-project --version`. The logic lives in `status` and `training.lineages`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

DIST_NAME = "pipeline_project"

checkpoint_app = typer.Typer(
    help="Checkpoints in S3: pull one (the newest, or a step) into a directory.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _fail(err: Exception) -> typer.Exit:
    from pipeline_project.training.errors import CheckpointNotFoundError

    text = str(err).splitlines()[0] if str(err) else ""
    typer.echo(
        f"error: {text if isinstance(err, CheckpointNotFoundError) else f'{type(err).__name__}: {text}'}", err=True
    )
    return typer.Exit(1)


def show_version(value: bool) -> None:
    """`--version`: the installed package's version (its metadata), then exit."""
    if value:
        from importlib.metadata import version

        typer.echo(f"pipeline-project {version(DIST_NAME)}")
        raise typer.Exit()


VersionOpt = Annotated[
    bool, typer.Option("--version", callback=show_version, is_eager=True, help="Print the version and exit")
]


def defaults() -> tuple[str, str]:
    """(checkpoints root, lineage) as the pipeline's resources default them: `PipelineLayout.checkpoints_prefix`
    and `TrainerResource.run_name`."""
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.defs.resources.trainer import TrainerResource

    return PipelineLayout.model_fields["checkpoints_prefix"].default, TrainerResource.model_fields["run_name"].default


def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object")] = False,
    limit: Annotated[int, typer.Option("--limit", help="Look at the newest N batches")] = 500,
    lineages: Annotated[int, typer.Option("--lineages", help="Show the N most recently trained lineages")] = 10,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each service may take to answer")] = 3.0,
    dagster_home: Annotated[
        Path | None, typer.Option("--dagster-home", help="Dagster instance [env DAGSTER_HOME, else the stack's]")
    ] = None,
) -> None:
    """Batches pending, running and failed (with their objects and ledger entries), the token topic against each
    lineage's saved position (lag), each lineage's newest checkpoint, and any service that fails its check."""
    from pipeline_project.cli.batches import dagster_instance
    from pipeline_project.ops.status import collect_status
    from pipeline_project.settings import Settings

    try:
        settings = Settings()
        with dagster_instance(dagster_home) as instance:
            root, lineage = defaults()
            report = collect_status(settings, instance, root=root, lineage=lineage, limit=limit, newest=lineages,
                                    timeout_s=timeout)  # fmt: skip
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
        return
    for line in _services_lines(report["services"]) + _batch_lines(report["batches"], settings.bucket):
        typer.echo(line)
    for line in _topic_lines(report["topic"]) + _checkpoint_lines(report["checkpoints"]):
        typer.echo(line)


def _services_lines(services: Any) -> list[str]:
    if isinstance(services, dict):
        return [f"services: the checks did not run ({services['error']})"]
    return ["services: every check passes"] if not services else ["services:", *(f"  {s}" for s in services)]


def _batch_lines(batches: dict, bucket: str) -> list[str]:
    if "error" in batches:
        return [f"batches: unknown ({batches['error']})"]
    counts = batches["counts"]
    lines = ["batches: " + (", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "none yet")]
    for section in ("pending", "running", "failed"):
        for row in batches[section]:
            ledger = row["ledger"]
            where = f"ledger {ledger['state']}, {ledger['blocks']} blocks" if ledger else "ledger unknown"
            run = f"  run {row['run_id']}" if row["run_id"] else ""
            lines.append(f"  {section:8} {row['batch']}  {row['status']}{run}  ({where})")
            if row["error"]:
                lines.append(f"      {row['step'] or 'run'}: {row['error']}")
            lines += [f"      s3://{bucket}/{key}" for key in row["objects"]]
    if "ledger_error" in batches:
        lines.append(f"  (ledger unreadable: {batches['ledger_error']})")
    return lines


def _topic_lines(topic: dict) -> list[str]:
    if "error" in topic:
        return [f"topic {topic['name']}: unknown ({topic['error']})"]
    parts = topic["partitions"]
    if not parts:
        return [f"topic {topic['name']}: not created yet"]
    ends = sum(p["end"] for p in parts.values())
    return [f"topic {topic['name']}: {len(parts)} partitions, end offsets sum {ends:,}"]


def _checkpoint_lines(checkpoints: dict) -> list[str]:
    if "error" in checkpoints:
        return [f"checkpoints: unknown ({checkpoints['error']})"]
    rows = checkpoints["lineages"]
    more = f"; {checkpoints['more']} older lineages not shown" if checkpoints["more"] else ""
    lines = [f"checkpoints (newest per lineage{more}):" if rows else "checkpoints: none yet"]
    for row in rows:
        if row["step"] is None:
            lines.append(f"  {row['lineage']}: no valid latest.json ({row.get('error', 'none')})")
            continue
        lag = f"  lag {row['lag_total']:,} offsets on {row['topic']}" if "lag" in row else ""
        lines.append(f"  {row['lineage']}  step {row['step']}  {row['created_at'][:19]}  {row['uri']}{lag}")
    return lines


@checkpoint_app.command("pull")
def pull(
    directory: Annotated[Path, typer.Argument(help="New or empty directory to download into")],
    lineage: Annotated[
        str | None, typer.Option("--lineage", help="The lineage [default: the trainer's run_name, deepseek]")
    ] = None,
    step: Annotated[int | None, typer.Option("--step", help="This step instead of the newest")] = None,
) -> None:
    """Download a checkpoint (`hf/`: load with `AutoModelForCausalLM.from_pretrained(DIR/hf)`; `resume/`)."""
    from pipeline_project.settings import Settings
    from pipeline_project.training.checkpoint.lineages import pull_checkpoint, resolve_checkpoint

    try:
        settings = Settings()
        s3 = settings.s3_client()
        root, default_lineage = defaults()
        lineage = lineage or default_lineage
        ref = resolve_checkpoint(s3, settings.bucket, root, lineage, step)
        pull_checkpoint(s3, settings.bucket, ref, directory)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    files = [p for p in directory.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files) / 1e6
    typer.echo(f"pulled step {ref.step} of {lineage} ({ref.uri}) into {directory}: {len(files)} files, {size:,.1f} MB")
