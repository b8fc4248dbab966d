"""`pipeline-project retune --config NEW.yaml [--batches B ...] [--write]`: what a new cleaning config would change
in batches already cleaned, from their attribute files (no raw text read; `cleaning/retune.py`).

The report counts, per domain, documents kept -> dropped and dropped with another reason, and the documents
that cannot be decided from the stored signals (with why). `--write` publishes the retuned batches that are not
yet produced to Kafka (`cleaning/retune_write.py`); a produced one is refused with a one-line error.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer


def load_config(path: Path):
    """A cleaning config from YAML or JSON overrides (the same overrides `CleaningResource.config_path` takes)."""
    import yaml

    from pipeline_project.cleaning import CleaningConfig

    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    return CleaningConfig.model_validate(yaml.safe_load(path.read_text()) or {})


def published_batches(client, bucket: str, shards_prefix: str) -> list[str]:
    paginator = client.get_paginator("list_objects_v2")
    out = []
    for page in paginator.paginate(Bucket=bucket, Prefix=shards_prefix, Delimiter="/"):
        out += [p["Prefix"][len(shards_prefix) : -1] for p in page.get("CommonPrefixes", [])]
    return sorted(out)


def produced_state(settings, topic: str, batches: list[str]) -> dict[str, str]:
    """{batch: what the ledger holds} for batches with a completion or progress record."""
    from pipeline_project.settings import KAFKA_SASL_PASSWORD_ENV, secret
    from pipeline_project.streaming.kafka_client import KafkaSettings
    from pipeline_project.streaming.ledger import read_ledger_records
    from pipeline_project.streaming.ledger_index import PostgresLedgerIndex

    kafka = KafkaSettings.from_settings(settings, sasl_password=secret(KAFKA_SASL_PASSWORD_ENV))
    index = PostgresLedgerIndex(settings.postgres_url)
    try:
        records = read_ledger_records(kafka, topic, keys=batches, index=index)
    finally:
        index.close()
    out = {b: f"completed, {r.blocks} blocks" for b, r in records.completed.items()}
    for b, r in records.progress.items():
        out.setdefault(b, f"partly produced, {r.blocks} blocks")
    return out


def retune_batches(client, bucket: str, layout, config, batches: list[str], produced: dict[str, str] | None) -> list:
    """Re-decide each batch; with `produced` (the ledger state), also write the ones that may be written."""
    from pipeline_project.cleaning.publish import read_shard_manifest
    from pipeline_project.cleaning.retune import Retuner
    from pipeline_project.cleaning.retune_write import check_writable, load_attributes, write_retuned

    results, retuners = [], {}
    for batch in batches:
        manifest = read_shard_manifest(client, bucket, layout.shard_dir(batch))
        table, old = load_attributes(client, bucket, manifest)
        key = old.config_hash()
        if key not in retuners:
            retuners[key] = Retuner(old, config)
        result = retuners[key].run(batch, table.to_pylist())
        if produced is not None:
            check_writable(result, produced.get(batch))
            write_retuned(client, bucket, layout.shard_dir(batch), manifest, table, result, config)
        results.append(result)
    return results


def report(results: list) -> dict:
    changes: Counter = Counter()
    for r in results:
        changes.update(r.changes())
    return {
        "batches": [r.batch_id for r in results],
        "documents": sum(len(r.rows) for r in results),
        "undecidable": sum(r.undecidable() for r in results),
        "notes": sorted({n for r in results for n in r.notes}),
        "changes": [
            {"domain": d, "change": c, "detail": detail, "documents": n}
            for (d, c, detail), n in sorted(changes.items())
        ],
    }


def retune(
    config: Annotated[Path, typer.Option("--config", help="The new cleaning config (YAML or JSON overrides)")],
    batches: Annotated[list[str] | None, typer.Option("--batches", help="Batches to retune (default: all)")] = None,
    write: Annotated[bool, typer.Option("--write", help="Publish retuned batches not yet produced to Kafka")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON")] = False,
) -> None:
    """What NEW.yaml would change in cleaned batches, from their stored quality signals (no raw text read)."""
    from pipeline_project.resources.layout import PipelineLayout
    from pipeline_project.settings import Settings

    try:
        settings = Settings()
        layout = PipelineLayout(bucket=settings.bucket, topic=settings.topic)
        client = settings.s3_client()
        new = load_config(config)
        chosen = batches or published_batches(client, layout.bucket, layout.shards_prefix)
        produced = produced_state(settings, layout.topic, chosen) if write else None
        out = report(retune_batches(client, layout.bucket, layout, new, chosen, produced))
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        typer.echo(f"error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(f"{len(out['batches'])} batches, {out['documents']} documents, {out['undecidable']} undecidable")
    for note in out["notes"]:
        typer.echo(f"note: {note}")
    for c in out["changes"]:
        typer.echo(f"{c['domain'] or '-':8} {c['change']:16} {c['detail']}: {c['documents']}")
    if write:
        typer.echo(f"written: {', '.join(out['batches']) or 'nothing'}")
