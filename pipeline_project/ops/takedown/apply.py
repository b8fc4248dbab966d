"""One takedown request, end to end: resolve the target to its copies, locate their blocks, retract them, block the
texts, read the exposure from the step logs, and store the request and its report in S3.

Order, and what a crash between two steps leaves: the request is stored first; the retraction is written next
(a request id per run that adds blocks, so running a request again after a batch of it was produced retracts the
rest); then the blocklist entries (keyed by request and origin: adding them again is a no-op); the report last.
Every step may be run again, so a takedown that failed part way is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.ops.takedown import blocklist as entries
from pipeline_project.ops.takedown.blocks import BlockHit, Located, block_ranges, locate
from pipeline_project.ops.takedown.corpus import Corpus, is_of_object, object_key, raw_documents
from pipeline_project.ops.takedown.exposure import first_exposures, read_exposures
from pipeline_project.ops.takedown.report import (
    CopyRow,
    ExposureReport,
    ExposureRow,
    LineageExposure,
    TakedownRequest,
    write_report,
    write_request,
)
from pipeline_project.ops.takedown.resolve import Copy, Fingerprint, dropped_copies, fingerprints, kept_copies

NOT_BUILT = [
    "copies in batches cleaned but not produced yet keep their place in the shards: run the takedown again once "
    "they are produced (their blocks are retracted then)",
    "the exclusion sink and attribute files still hold the copies' (masked) records",
    "raw objects are kept as they are (no quarantine or delete policy)",
]


@dataclass
class Stores:
    """What a takedown reads and writes, opened from the settings (`open_stores`) or given by a test."""

    s3: Any
    bucket: str
    kafka: Any  # streaming.kafka.client.KafkaSettings
    topic: str
    index: Any  # cleaning.dedup.index.DedupLookup
    blocklist: Any  # cleaning.dedup.blocklist.Blocklist
    ledger_index: Any  # streaming.ledger.index.LedgerIndex | None
    config: CleaningConfig
    corpus: Corpus
    checkpoints_root: str = "checkpoints"
    lineages: Sequence[str] | None = None  # None: every lineage under the root
    locate: Callable[..., Located] = locate  # kept copies -> their blocks (`blocks.locate`; a test's stand-in)
    closers: list = field(default_factory=list)
    mlflow: Any = None  # an MlflowClient: the exposed checkpoints' model versions are tagged (None: not)

    def close(self) -> None:
        for close in self.closers:
            close()


@dataclass
class Resolved:
    prints: list[Fingerprint]
    copies: list[Copy]
    located: Located


def target_texts(stores: Stores, kind: str, value: str, text: str | None = None) -> tuple[list, list[Copy]]:
    """((origin, text) to fingerprint, the target's own published documents) of a `source`, `doc` or `text`."""
    if kind == "text":
        return [("text", text or "")], []
    key = object_key(value) if kind == "doc" else value
    wanted = (lambda d: d == value) if kind == "doc" else (lambda d: is_of_object(d, key))
    texts = [(d.id, d.text) for d in raw_documents(stores.s3, stores.bucket, key, stores.config) if wanted(d.id)]
    own: list[Copy] = []
    for batch in stores.corpus.batches_of_object(key):
        for rec in stores.corpus.kept(batch):
            if wanted(str(rec.get("id"))):
                own.append(Copy(batch, str(rec["id"]), "exact", 1.0, "kept"))
                texts.append((str(rec["id"]), str(rec.get("text") or "")))
        for rec in stores.corpus.excluded(batch):
            if wanted(str(rec.get("id"))) and rec.get("kind") == "dropped":
                own.append(Copy(batch, str(rec["id"]), "exact", 1.0, "dropped", str(rec.get("reason") or "")))
                texts.append((str(rec["id"]), str(rec.get("text") or "")))
    return texts, own


def resolve(stores: Stores, kind: str, value: str, text: str | None = None) -> Resolved:
    texts, own = target_texts(stores, kind, value, text)
    prints = fingerprints([t for t in texts if t[1].strip()], stores.config)
    if not prints and not own:
        raise LookupError(f"{kind} {value!r}: no text found (not in S3, not in any published batch)")
    kept = kept_copies(stores.index, prints, stores.config.dedup.minhash)
    found = {c.ref: c for c in own if c.state == "kept"} | {c.ref: c for c in kept}
    records = ((b, rec) for b in stores.corpus.batches() for rec in stores.corpus.excluded(b))
    dropped = {c.ref: c for c in dropped_copies(records, list(found.values()), prints, stores.config)}
    dropped |= {c.ref: c for c in own if c.state == "dropped"}
    copies = sorted([*found.values(), *dropped.values()], key=lambda c: (c.batch, c.doc_id))
    located = stores.locate(stores.kafka, stores.topic, stores.corpus, stores.ledger_index, copies)
    return Resolved(prints, copies, located)


def retract(stores: Stores, request: str, hits: Sequence[BlockHit], operator: str) -> tuple[str | None, int]:
    """Retract the blocks not retracted by an earlier run of `request`: (the retraction request written, blocks)."""
    from pipeline_project.streaming.retractions.model import Retraction
    from pipeline_project.streaming.retractions.topic import read_retractions, write_retraction

    base = f"takedown:{request}"
    held = read_retractions(stores.kafka, stores.topic).requests
    mine = [r for rid, r in held.items() if rid == base or rid.startswith(f"{base}:")]

    def covered(h: BlockHit) -> bool:
        return any(
            (r.partition, r.offset) == (h.partition, h.offset) and r.holds(h.block) for m in mine for r in m.blocks
        )

    new = [h for h in hits if not covered(h)]
    if not new:
        return (mine[0].request_id if mine else None), 0
    request_id = base if not mine else f"{base}:{len(mine) + 1}"
    ranges = block_ranges(new)
    retraction = Retraction(request_id=request_id, reason=base, blocks=ranges, operator=operator or None)
    write_retraction(stores.kafka, stores.topic, retraction)
    return request_id, len({h.address for h in new})


def copy_rows(copies: Sequence[Copy], located: Located) -> list[CopyRow]:
    blocks: dict[str, set] = {}
    for h in located.hits:
        blocks.setdefault(f"{h.batch}/{h.doc_id}", set()).add(h.address)
    return [
        CopyRow(
            batch=c.batch,
            doc_id=c.doc_id,
            kind=c.kind,
            similarity=round(c.similarity, 4),
            state=c.state,
            reason=c.reason,
            blocks=len(blocks.get(c.ref, ())),
            produced=c.state == "kept" and c.batch not in located.unproduced,
        )
        for c in copies
    ]


def lineage_rows(exposures: Sequence[ExposureRow]) -> list[LineageExposure]:
    first = first_exposures(exposures)
    rows = []
    for lineage, e in sorted(first.items()):
        mine = [x for x in exposures if x.lineage == lineage]
        rows.append(
            LineageExposure(
                lineage=lineage,
                first_checkpoint=e.checkpoint,
                first_step=e.step,
                steps=len({x.step for x in mine}),
                ranks=sorted({x.rank for x in mine}),
                tokens=sum(x.tokens for x in mine),
            )
        )
    return rows


def exposure_part(stores: Stores, hits: Sequence[BlockHit]) -> dict:
    exposures, read = read_exposures(
        stores.s3, stores.bucket, stores.checkpoints_root, stores.topic, hits, stores.lineages
    )
    lineages = lineage_rows(exposures)
    earliest = min(lineages, key=lambda r: r.first_step, default=None)
    return {
        "exposures": list(exposures),
        "lineages": lineages,
        "first_checkpoint": earliest.first_checkpoint if earliest else None,
        "checkpoints_read": read,
    }


def takedown(stores: Stores, request: TakedownRequest, text: str | None = None) -> ExposureReport:
    """Apply `request` (its target read from S3, or `text` for a `text` target) and store its report."""
    write_request(stores.s3, stores.bucket, request)
    resolved = resolve(stores, request.target_kind, request.target, text)
    hits = resolved.located.hits
    retraction, retracted = retract(stores, request.request_id, hits, request.operator)
    cfg = stores.config.dedup.minhash
    added = stores.blocklist.add(entries.entries(request.request_id, resolved.prints, resolved.copies, cfg))
    report = ExposureReport(
        request=request,
        fingerprints=len(resolved.prints),
        copies=copy_rows(resolved.copies, resolved.located),
        blocks=len({h.address for h in hits}),
        retraction=retraction,
        retracted_now=retracted,
        blocklist_added=added,
        unproduced_batches=resolved.located.unproduced,
        not_done=NOT_BUILT,
        **exposure_part(stores, hits),
    )
    if stores.mlflow is not None:
        from pipeline_project.ops.takedown.mlflow_tags import tag_exposed_versions

        report = report.model_copy(update={"tagged_versions": tag_exposed_versions(stores.mlflow, report)})
    return write_report(stores.s3, stores.bucket, report)
