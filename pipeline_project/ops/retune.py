"""What a new cleaning config would change in batches already cleaned, from their attribute files (no raw text read; `cleaning/retune.py`).

The report counts, per domain, documents kept -> dropped and dropped with another reason, and the documents
that cannot be decided from the stored signals (with why). A decontamination change (a new benchmark) re-checks
the cleaned text of the documents that reached the step (`cleaning/retune_decontam.py`). It lists the affected
documents (kept ones the new config drops: batch, document, S3 object and record, reason, benchmark) and, for
each batch that has some, whether it is already produced to Kafka (the ledger; so this needs Kafka and
PostgreSQL): a produced batch's blocks are in the topic, so retire its ledger entry and re-clean it, or accept.
`--write` publishes the retuned batches that are not yet produced and can be written (`cleaning/retune_write.py`),
lists the ones it refused, with why, and then exits 1 if it refused any.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path


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
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.ledger.index import PostgresLedgerIndex
    from pipeline_project.streaming.ledger.records import read_ledger_records

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


# Holds one batch while a write decides and writes; yields what the ledger holds of it, read under the hold
Guard = Callable[[str], AbstractContextManager[str | None]]


def retune_batches(client, bucket: str, layout, config, batches: list[str], guard: Guard | None, forget=None) -> list:
    """Re-decide each batch; with `guard`, also write the ones that may be written (the others get `refused`,
    why), each under its guard: the ledger state and the manifest are read again there, so a batch produced or
    re-published since the report read it is refused, not overwritten. `forget`: `retune.write.forget_documents`
    for the dedup index."""
    from pipeline_project.cleaning.output.publish import read_shard_manifest
    from pipeline_project.cleaning.retune.decide import Retuner
    from pipeline_project.cleaning.retune.write import load_attributes

    results, retuners = [], {}
    for batch in batches:
        manifest = read_shard_manifest(client, bucket, layout.shard_dir(batch))
        table, old = load_attributes(client, bucket, manifest)
        key = (old.model_dump_json(), manifest.config_hash)
        if key not in retuners:
            retuners[key] = Retuner(old, config, manifest.config_hash)
        rows = table.to_pylist()
        result = retuners[key].run(batch, rows, _text_of(client, bucket, manifest, rows))
        if guard is not None:
            _write_guarded(client, bucket, layout, config, (manifest, table, result), guard, forget)
        results.append(result)
    return results


def _write_guarded(client, bucket: str, layout, config, read: tuple, guard: Guard, forget) -> None:
    from pipeline_project.cleaning.output.publish import read_shard_manifest
    from pipeline_project.cleaning.retune.write import RetuneRefusedError, check_writable, write_retuned

    manifest, table, result = read
    with guard(result.batch_id) as produced:
        try:
            if read_shard_manifest(client, bucket, layout.shard_dir(result.batch_id)) != manifest:
                raise RetuneRefusedError(
                    f"batch {result.batch_id} was published again since the retune read it; run the retune again"
                )
            check_writable(result, produced)
        except RetuneRefusedError as refused:
            result.refused = str(refused)
            return
        write_retuned(client, bucket, layout.shard_dir(result.batch_id), manifest, table, result, config, forget)
        result.written = True


def known_state(produced: dict[str, str]) -> Guard:
    """A guard that holds nothing and reports `produced` (one writer and a ledger state known beforehand: tests)."""
    return lambda batch: nullcontext(produced.get(batch))


def ledger_guard(settings, topic: str) -> Guard:
    """Hold the batch (`common.batch_lock`, in the deployment's PostgreSQL) and read its ledger state under it."""
    from pipeline_project.common.batch_lock import batch_lock

    @contextmanager
    def guard(batch: str) -> Iterator[str | None]:
        with batch_lock(settings.postgres_url, batch):
            yield produced_state(settings, topic, [batch]).get(batch)

    return guard


def _text_of(client, bucket: str, manifest, rows: list[dict]):
    from pipeline_project.cleaning.retune.decontam import published_texts

    kept = {r["doc_id"] for r in rows if r["decision"] == "kept"}

    def text_of(ids: list[str]) -> dict[str, str]:
        return published_texts(
            client, bucket, manifest, [i for i in ids if i in kept], [i for i in ids if i not in kept]
        )

    return text_of


def report(results: list, produced: dict[str, str] | None = None) -> dict:
    """The report; `produced`: the ledger state of the batches (those not in it are not produced)."""
    changes: Counter = Counter()
    for r in results:
        changes.update(r.changes())
    affected = [a for r in results for a in r.affected()]
    return {
        "batches": [r.batch_id for r in results],
        "documents": sum(len(r.rows) for r in results),
        "undecidable": sum(r.undecidable() for r in results),
        "notes": sorted({n for r in results for n in r.notes}),
        "changes": [
            {"domain": d, "change": c, "detail": detail, "documents": n}
            for (d, c, detail), n in sorted(changes.items())
        ],
        "affected": affected,
        "affected_batches": {b: (produced or {}).get(b) or "" for b in sorted({a["batch"] for a in affected}, key=str)},
        "written": [r.batch_id for r in results if r.written],
        "refused": {r.batch_id: r.refused for r in results if r.refused},
    }


def run_retune(
    settings, layout, config, batches: list[str] | None, write: bool, dedup_url: str = "", dedup_schema: str = "dedup"
) -> dict:
    """The report of `retune` (see the module), on the stack `settings` names and the batches under `layout`;
    written batches' dropped documents leave the dedup index at `dedup_url` (default: the settings' PostgreSQL)."""
    from pipeline_project.cleaning.retune.write import forget_documents

    client = settings.s3_client()
    chosen = batches or published_batches(client, layout.bucket, layout.shards_prefix)
    forget = forget_documents(dedup_url or settings.postgres_url, dedup_schema)
    guard = ledger_guard(settings, layout.topic.name) if write else None
    results = retune_batches(client, layout.bucket, layout, config, chosen, guard, forget)
    affected = sorted({a["batch"] for r in results for a in r.affected()})
    produced = produced_state(settings, layout.topic.name, affected) if affected else {}
    return report(results, produced)
