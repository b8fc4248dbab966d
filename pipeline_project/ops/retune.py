"""What a new cleaning config would change in batches already cleaned, from their attribute files (no raw text read; `cleaning/retune.py`).

The report counts, per domain, documents kept -> dropped and dropped with another reason, and the documents
that cannot be decided from the stored signals (with why). A decontamination change (a new benchmark) re-checks
the cleaned text of the documents that reached the step (`cleaning/retune_decontam.py`). It lists the affected
documents (kept ones the new config drops: batch, document, S3 object and record, reason, benchmark) and, for
each batch that has some, whether it is already produced to Kafka (the ledger; so this needs Kafka and
PostgreSQL).

`--write` publishes the retuned batches (`cleaning/retune_write.py`), each under the batch's hold. A batch not yet
produced is simply published again. A produced batch (a completed ledger entry) is published again too, after the
blocks of the topic that hold the documents it drops are retracted (`streaming/retractions`, request
`retune:<batch>:<manifest hash>:<config hash>`, found from the messages' `spans` and `pub` headers,
`provenance.blocks`), so no loader trains them from then on; the reads of those blocks that the checkpoints' step
logs record are the batch's exposure in the report (`provenance.blocks.consumed_blocks`). The publication in the
topic is archived first and keeps its shards, so `trace` of its blocks stays right. A batch partly produced, one
whose messages carry no `spans` header, or one whose current manifest is not the publication in the topic and is
not archived, is refused with why; so is a batch with undecidable documents or documents that would be kept
again. `--write` exits 1 if it refused any.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any


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
# Under the hold of a produced batch: retracts the blocks of the documents the retune drops and returns what it did
# (`request`, `blocks`, `exposure`, ...); raises RetuneRefusedError when it cannot
Retract = Callable[[Any, Any], dict]


def retune_batches(
    client, bucket: str, layout, config, batches: list[str], guard: Guard | None, forget=None, retract=None
) -> list:
    """Re-decide each batch; with `guard`, also write the ones that may be written (the others get `refused`,
    why), each under its guard: the ledger state and the manifest are read again there, so a batch produced or
    re-published since the report read it is refused, not overwritten. `forget`: `retune.write.forget_documents`
    for the dedup index. `retract` (a `Retract`, `ledger_retractor`): a produced batch is written after its
    affected blocks are retracted; without it a produced batch is refused."""
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
            _write_guarded(client, bucket, layout, config, (manifest, table, result), guard, forget, retract)
        results.append(result)
    return results


def _write_guarded(client, bucket: str, layout, config, read: tuple, guard: Guard, forget, retract) -> None:
    from pipeline_project.cleaning.output.publish import read_shard_manifest
    from pipeline_project.cleaning.retune.write import RetuneRefusedError, check_writable, write_retuned
    from pipeline_project.provenance.publications import is_archived

    manifest, table, result = read
    shard_dir = layout.shard_dir(result.batch_id)
    with guard(result.batch_id) as produced:
        try:
            if read_shard_manifest(client, bucket, shard_dir) != manifest:
                raise RetuneRefusedError(
                    f"batch {result.batch_id} was published again since the retune read it; run the retune again"
                )
            check_writable(result, produced, retracts=retract is not None)
            retracted = retract(manifest, result) if produced else None
        except RetuneRefusedError as refused:
            result.refused = str(refused)
            return
        keep = is_archived(client, bucket, shard_dir, manifest)  # produced: its blocks in the topic name it
        write_retuned(client, bucket, shard_dir, manifest, table, result, config, forget, delete_old=not keep)
        result.written = True
        result.retracted = retracted


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


def ledger_retractor(settings, layout, config, lineages: list[str] | None = None) -> Retract:
    """A `Retract` on the deployment `settings` names: the batch's completed ledger entry, the messages it names,
    the retraction written to `<topic>.retractions`, and the reads of those blocks in the step logs of `lineages`
    (default: every lineage under `layout.checkpoints_prefix`)."""

    def retract(manifest, result) -> dict:
        from pipeline_project.cleaning.retune.write import RetuneRefusedError
        from pipeline_project.provenance.blocks import block_ranges, consumed_blocks, document_blocks
        from pipeline_project.streaming.ledger.retire import default_operator
        from pipeline_project.streaming.retractions.model import Retraction
        from pipeline_project.streaming.retractions.topic import write_retraction

        batch, client = result.batch_id, settings.s3_client()
        kafka, topic, entry, in_topic = _produced_publication(settings, layout, batch, manifest)
        dropped = set(result.newly_dropped())
        done = {"request": None, "publication": entry.content_hash, "blocks": 0, "exposure": []}
        if not dropped:
            return done
        ordinals = _ordinals(client, layout.bucket, in_topic, dropped)
        offsets = {str(p): r for p, r in entry.offsets.items()}
        found = document_blocks(kafka, topic, offsets, entry.source or batch, entry.content_hash, ordinals)
        if found.unrecorded:
            raise RetuneRefusedError(
                f"batch {batch}: {len(found.unrecorded)} of its messages carry no spans header (produced before "
                "spans), so the blocks of its documents are unknown; retire its ledger entry and re-clean it"
            )
        if found.blocks:
            done["request"] = f"retune:{batch}:{manifest.content_hash()[:16]}:{config.config_hash()[:16]}"
            reason = f"retune --write: {len(dropped)} documents of batch {batch} dropped by the new cleaning config"
            blocks = block_ranges(found.blocks)
            retraction = Retraction(
                request_id=done["request"], reason=reason, blocks=blocks, operator=default_operator()
            )
            write_retraction(kafka, topic, retraction)  # a request already there (a retry) is not written again
        root = layout.checkpoints_prefix.rstrip("/")
        reads = consumed_blocks(client, layout.bucket, root, topic, found.blocks, lineages)
        for row in reads:
            row["tokens"] = sum(found.blocks[(row["partition"], row["offset"], row["block"])].values())
        return {**done, "blocks": len(found.blocks), "exposure": reads}

    return retract


def _produced_publication(settings, layout, batch: str, manifest) -> tuple:
    """(kafka, topic, the batch's completed ledger entry, the manifest of the publication it produced), the current
    manifest archived when it is that publication; RetuneRefusedError when there is no such entry or manifest."""
    from pipeline_project.cleaning.retune.write import RetuneRefusedError
    from pipeline_project.ops.connect import ledger
    from pipeline_project.provenance.publications import archive_publication, publication_manifest
    from pipeline_project.streaming.ledger.records import read_ledger_records

    client, shard_dir = settings.s3_client(), layout.shard_dir(batch)
    kafka, topic, index = ledger(settings, layout.topic.name)
    try:
        entry = read_ledger_records(kafka, topic, keys=[batch], index=index).completed.get(batch)
    finally:
        index.close()
    if entry is None:
        raise RetuneRefusedError(
            f"batch {batch} is partly produced: let token_blocks finish it, or retire its ledger entry "
            f"(pipeline-project ledger retire {batch} --reason TEXT), then retune"
        )
    if entry.content_hash == manifest.content_hash():
        archive_publication(client, layout.bucket, shard_dir, manifest)  # its blocks stay in the topic, naming it
    in_topic = publication_manifest(client, layout.bucket, shard_dir, entry.content_hash)
    if in_topic is None:
        raise RetuneRefusedError(
            f"batch {batch}: the topic holds publication {entry.content_hash[:16]}, which is neither its "
            "current manifest nor archived; retire its ledger entry and re-clean it"
        )
    return kafka, topic, entry, in_topic


def _ordinals(client, bucket: str, manifest, doc_ids: set[str]) -> list[int]:
    """The positions in `manifest`'s shards of the documents `doc_ids`."""
    from pipeline_project.cleaning.output.shards import read_shard

    records = (
        r for e in manifest.shards for r in read_shard(client.get_object(Bucket=bucket, Key=e.key)["Body"].read())
    )
    return [i for i, r in enumerate(records) if str(r.get("id")) in doc_ids]


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
        # produced batches written: the retraction of their affected blocks and the reads the step logs record
        "retracted": {r.batch_id: r.retracted for r in results if r.retracted is not None},
    }


def run_retune(
    settings, layout, config, batches: list[str] | None, write: bool, dedup_url: str = "", dedup_schema: str = "dedup"
) -> dict:
    """The report of `retune` (see the module), on the stack `settings` names and the batches under `layout`;
    written batches' dropped documents leave the dedup index at `dedup_url` (default: the settings' index, every
    shard of it)."""
    from pipeline_project.cleaning.dedup.opening import index_urls
    from pipeline_project.cleaning.retune.write import forget_documents

    client = settings.s3_client()
    chosen = batches or published_batches(client, layout.bucket, layout.shards_prefix)
    # the index's rows may be on any of its shards: forgetting visits every database that holds them
    forget = forget_documents(dedup_url or index_urls(settings.postgres_url, settings.dedup_shard_urls), dedup_schema)
    guard = ledger_guard(settings, layout.topic.name) if write else None
    retract = ledger_retractor(settings, layout, config) if write else None
    results = retune_batches(client, layout.bucket, layout, config, chosen, guard, forget, retract)
    affected = sorted({a["batch"] for r in results for a in r.affected()})
    produced = produced_state(settings, layout.topic.name, affected) if affected else {}
    return report(results, produced)
