"""`pipeline-project takedown` and `pipeline-project why` (`ops.takedown`).

    pipeline-project takedown (--source KEY | --doc ID | --text FILE) --request ID --reason TEXT
    pipeline-project why <s3-key | doc-id>

`takedown` resolves the target to every exact and near copy, retracts the blocks of the kept ones, puts the texts
on the cleaning's blocklist, and prints the exposure report (also stored at s3://<bucket>/takedowns/<ID>/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail

SchemaOpt = Annotated[str, typer.Option("--dedup-schema", help="PostgreSQL schema of the dedup index")]
ShardsOpt = Annotated[str, typer.Option("--shards-prefix", help="Prefix of the published shards")]
LineageOpt = Annotated[
    list[str] | None, typer.Option("--lineage", help="Only these lineages' checkpoints (default: every lineage)")
]


def _stores(dedup_schema: str, shards_prefix: str, lineages: list[str] | None):
    from pipeline_project.ops.checkpoints import defaults
    from pipeline_project.ops.takedown import open_stores

    root, _ = defaults()
    return open_stores(
        context.settings(),
        dedup_schema=dedup_schema,
        shards_prefix=shards_prefix,
        checkpoints_root=root,
        lineages=lineages,
    )


def print_report(report) -> None:
    r = report
    typer.echo(f"takedown {r.request.request_id}: {r.request.target_kind} {r.request.target} ({r.request.reason})")
    typer.echo(f"copies: {len(r.copies)} ({sum(c.state == 'kept' for c in r.copies)} kept)")
    for c in r.copies:
        where = f"{c.blocks} blocks" if c.produced else "not produced" if c.state == "kept" else c.reason
        typer.echo(f"  {c.state:8} {c.kind:5} {c.similarity:.2f}  {c.batch}/{c.doc_id}  {where}")
    typer.echo(f"retracted: {r.retracted_now} blocks now, {r.blocks} in all (request {r.retraction or '-'})")
    typer.echo(f"blocklist: {r.blocklist_added} entries added")
    if r.unproduced_batches:
        typer.echo(f"not produced yet (run the takedown again once they are): {', '.join(r.unproduced_batches)}")
    typer.echo(f"exposure: {len(r.exposures)} block reads in {r.checkpoints_read} checkpoints read")
    for lin in r.lineages:
        typer.echo(
            f"  {lin.lineage}: first at step {lin.first_step} ({lin.first_checkpoint}), {lin.steps} steps, "
            f"ranks {lin.ranks}, {lin.tokens} tokens"
        )
    for e in r.exposures:
        typer.echo(f"    step {e.step} rank {e.rank}: {e.partition}@{e.offset} block {e.block}, {e.tokens} tokens")
    typer.echo(f"report: {r.report_uri}")


def takedown(
    request: Annotated[str, typer.Option("--request", help="The request id (letters, digits, ._-)")],
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with the request)")],
    source: Annotated[str | None, typer.Option("--source", help="A raw object's S3 key")] = None,
    doc: Annotated[str | None, typer.Option("--doc", help="A document id (<raw key>#<line>, or the key)")] = None,
    text: Annotated[Path | None, typer.Option("--text", help="A file holding the text")] = None,
    lineage: LineageOpt = None,
    dedup_schema: SchemaOpt = "dedup",
    shards_prefix: ShardsOpt = "shards/",
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON")] = False,
) -> None:
    """Take a text out of the corpus and of training: retract its copies' blocks, block re-uploads, report which
    checkpoints trained on it."""
    from pipeline_project.ops.takedown import TakedownRequest
    from pipeline_project.ops.takedown import takedown as apply
    from pipeline_project.streaming.ledger.retire import default_operator

    try:
        given = [(k, v) for k, v in (("source", source), ("doc", doc), ("text", text)) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of --source, --doc, --text")
        kind, value = given[0]
        body = Path(value).read_text(encoding="utf-8") if kind == "text" else None
        req = TakedownRequest(
            request_id=request, reason=reason, target_kind=kind, target=str(value), operator=default_operator()
        )
        stores = _stores(dedup_schema, shards_prefix, lineage)
        try:
            report = apply(stores, req, body)
        finally:
            stores.close()
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        print_report(report)


def why(
    ref: Annotated[str, typer.Argument(help="A raw object's S3 key, or a document id")],
    lineage: LineageOpt = None,
    dedup_schema: SchemaOpt = "dedup",
    shards_prefix: ShardsOpt = "shards/",
) -> None:
    """What became of a document: kept or dropped and why, its copies, its blocks, the checkpoints that trained on
    it (JSON)."""
    from pipeline_project.ops.takedown import why as explain

    try:
        stores = _stores(dedup_schema, shards_prefix, lineage)
        try:
            result = explain(stores, ref)
        finally:
            stores.close()
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    typer.echo(json.dumps(result, indent=2, sort_keys=True, default=str))
