"""`pipeline-project summary`: the public training-content summary of a checkpoint (`provenance.content_summary`).

    pipeline-project summary [--lineage L] [--checkpoint STEP] [--provider-info FILE] [--json] [--no-write]

Prints the Markdown (or the JSON) and stores both beside the lineage's checkpoints, as the
`training_content_summary` asset does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail


def summary(
    lineage: Annotated[
        str | None, typer.Option("--lineage", help="The checkpoint lineage (default: the trainer's)")
    ] = None,
    checkpoint: Annotated[
        int | None, typer.Option("--checkpoint", help="The checkpoint's step (default: newest)")
    ] = None,
    provider_info: Annotated[
        Path | None, typer.Option("--provider-info", help="JSON of what only the provider knows (provider, model, ...)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON document")] = False,
    write: Annotated[bool, typer.Option("--write/--no-write", help="Store both documents in S3")] = True,
) -> None:
    """The EU AI Act training-content summary (Art. 53(1)(d)) of a checkpoint, from the pipeline's records."""
    from pipeline_project.ops.checkpoints import defaults
    from pipeline_project.ops.connect import kafka_settings
    from pipeline_project.provenance.content_summary import Provider, Stores, summarize

    try:
        settings = context.settings()
        root, default_lineage = defaults()
        provider = Provider.from_dict(json.loads(provider_info.read_text()) if provider_info else None)
        stores = Stores(
            s3=settings.s3_client(),
            bucket=settings.bucket,
            kafka=kafka_settings(settings),
            topic=settings.topic,
            checkpoints_root=root,
            raw_prefix=settings.raw_prefix,
        )
        fim = {"code_rate": settings.fim_code_rate} if settings.fim_code_rate else {}
        done = summarize(stores, lineage or default_lineage, checkpoint, provider=provider, fim=fim, write=write)
    except Exception as err:  # noqa: BLE001 - one line, as every command
        raise fail(err) from None
    typer.echo(json.dumps(done.document, indent=1, sort_keys=True) if as_json else done.markdown)
    if write:
        typer.echo(f"stored: {done.markdown_uri} {done.json_uri}", err=True)
    if not done.adds_up:
        typer.echo("warning: the summary's counts do not add up (see its accounting)", err=True)
