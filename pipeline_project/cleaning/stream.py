"""Clean a batch of any size in bounded memory: chunk by chunk through the chain, out to a `BatchWriter`.

    items (documents and quarantine records, streamed from S3)
      -> chunks of `chunk_docs` documents or `chunk_bytes` of text
      -> CleaningPipeline (filters in a process pool when given one), deduplicated against the cross-batch
         index AND the batch's earlier chunks (`ChainedIndex`)
      -> kept documents appended to shards, dropped/quarantined records to the exclusion sink

Memory holds two chunks (with a pool, the workers filter chunk n+1 while this process deduplicates and writes
chunk n), one shard and, per kept document, its dedup keys (about 600 bytes), never the batch's text. Within a
chunk a candidate is verified against its text; a candidate from an earlier chunk is verified by signature estimate
(as candidates from earlier batches are), because its text is no longer held.

`run` only reads the cross-batch index. `commit` writes the batch's kept documents to it (first writer wins)
and retracts from the shards the documents another batch published first. `publish` is the end of a batch in
the asset: reserve in the index (pending) -> exclusion sink -> manifest -> make the index rows visible, so the
index never holds a document whose manifest was not written (see `dedup_store`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from pipeline_project.cleaning.chain.chain import CleaningPipeline, CleaningResult, Started, removal_tables
from pipeline_project.cleaning.chain.pool import FilterPool
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup.blocklist import Blocklist
from pipeline_project.cleaning.dedup.copies import batch_copies
from pipeline_project.cleaning.dedup.index import DedupIndex
from pipeline_project.cleaning.dedup.local import ChainedIndex, LocalIndex
from pipeline_project.cleaning.errors import CountsMismatchError
from pipeline_project.cleaning.output import attributes
from pipeline_project.cleaning.output.attributes import DUP_STEPS, duplicate_of
from pipeline_project.cleaning.output.writer import BatchWriter
from pipeline_project.cleaning.records import DocState, Document, Dropped, Quarantined
from pipeline_project.cleaning.steps import StepStats
from pipeline_project.cleaning.steps.dedup import signature_threshold

log = logging.getLogger(__name__)

T = TypeVar("T")
ExclusionRecords = Callable[[list[Dropped], list[Quarantined]], list[dict]]


def chunks(items: Iterable[Document | Quarantined], chunk_docs: int, chunk_bytes: int) -> Iterator[list]:
    chunk: list = []
    size = 0
    for item in items:
        chunk.append(item)
        size += len(item.text) if isinstance(item, Document) else 0
        if len(chunk) >= chunk_docs or size >= chunk_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


@dataclass
class StreamResult:
    batch_id: str
    counts: Counter = field(default_factory=Counter)
    step_stats: list[StepStats] = field(default_factory=list)
    dropped_by_reason: Counter = field(default_factory=Counter)
    chunks: int = 0
    # the dedup keys of every kept document, for the index commit
    doc_ids: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)  # each kept document's profile, for the index_commit rows
    exact: list[np.ndarray] = field(default_factory=list)
    bands: list[np.ndarray] = field(default_factory=list)
    signatures: list[np.ndarray] = field(default_factory=list)
    copies: Counter = field(default_factory=Counter)  # (kept "<batch>/<doc>", exact|near) -> duplicates dropped

    def add_stats(self, stats: list[StepStats]) -> None:
        by_key = {(s.profile, s.name): s for s in self.step_stats}
        for s in stats:
            m = by_key.get((s.profile, s.name))
            if m is None:
                m = StepStats(s.name, profile=s.profile)
                self.step_stats.append(m)
                by_key[(s.profile, s.name)] = m
            m.absorb(s)

    def count(self, result: CleaningResult) -> None:
        for key in ("in", "kept", "dropped", "quarantined"):
            self.counts[key] += result.counts[key]
        self.dropped_by_reason.update(result.dropped_by_reason())

    def check_counts(self) -> None:
        c = self.counts
        if c["in"] != c["kept"] + c["dropped"] + c["quarantined"]:
            raise CountsMismatchError(f"cleaning lost documents: {dict(c)}")

    def removal_table_markdown(self) -> str:
        return removal_tables(self.step_stats, dict(self.counts))


class StreamingCleaner:
    def __init__(
        self,
        config: CleaningConfig,
        pool: FilterPool | None = None,
        chunk_docs: int = 5000,
        chunk_bytes: int = 64 * 1024 * 1024,
        blocklist: Blocklist | None = None,
    ):
        self.config = config
        self.blocklist = blocklist  # the takedown blocklist the chains consult (`steps.blocked`); None: none
        self.pipeline = CleaningPipeline(config, pool=pool)
        self.chunk_docs = chunk_docs
        self.chunk_bytes = chunk_bytes

    def attribute_writer(self) -> attributes.AttributeWriter:
        """A writer of the attribute file for this config's signals (for `BatchWriter.attributes`)."""
        return attributes.AttributeWriter(self.config, attributes.signal_columns(self.pipeline.chains))

    def run(
        self,
        items: Iterable[Document | Quarantined],
        batch_id: str,
        index: DedupIndex | None,
        writer: BatchWriter,
        exclusion_records: ExclusionRecords,
    ) -> StreamResult:
        cfg = self.config.dedup.minhash
        local = LocalIndex(num_perm=cfg.num_buckets * cfg.hashes_per_bucket, num_bands=cfg.num_buckets)
        earlier = index if self.config.dedup.scope == "global" else None
        chained = ChainedIndex(earlier, local)
        out = StreamResult(batch_id=batch_id)
        previous = None
        for chunk in chunks(items, self.chunk_docs, self.chunk_bytes):
            started = self.pipeline.start(chunk, batch_id)  # with a pool, its workers filter this chunk ...
            if previous is not None:  # ... while this process deduplicates and writes the one before
                self._finish(previous, out, chained, local, writer, exclusion_records)
            previous = started
        if previous is not None:
            self._finish(previous, out, chained, local, writer, exclusion_records)
        out.check_counts()
        return out

    def _finish(
        self,
        started: Started,
        out: StreamResult,
        chained: ChainedIndex,
        local: LocalIndex,
        writer: BatchWriter,
        exclusion_records: ExclusionRecords,
    ) -> None:
        result = self.pipeline.finish(started, chained, self.blocklist)
        out.chunks += 1
        out.add_stats(result.step_stats)
        out.count(result)
        writer.add_attributes(attributes.rows_of(result.kept, result.dropped, result.quarantined))
        out.copies.update(dup for d in result.dropped if d.step in DUP_STEPS and (dup := duplicate_of(d.reason)))
        self._remember(out, local, result.kept)
        writer.add_kept(result.kept)
        writer.add_excluded(exclusion_records(result.dropped, result.quarantined))
        log.info("batch %s chunk %d: %s", out.batch_id, out.chunks, dict(result.counts))

    def _remember(self, out: StreamResult, local: LocalIndex, kept: list[Document]) -> None:
        """Keep the kept documents' dedup keys (for later chunks and the commit); drop their per-step state."""
        n = len(kept)
        exact = np.array([d.state.exact_key or 0 for d in kept], dtype=np.uint64)
        sigs = np.zeros((n, local.num_perm), dtype=np.uint32)
        bands = np.zeros((n, local.num_bands), dtype=np.uint64)
        for i, d in enumerate(kept):
            if d.state.minhash is not None:
                sigs[i], bands[i] = d.state.minhash
            d.state = DocState()
        ids = [d.id for d in kept]
        local.add(out.batch_id, ids, exact, bands, sigs)
        out.doc_ids.extend(ids)
        out.domains.extend(d.meta.get("domain", "") for d in kept)
        out.exact.append(exact)
        out.bands.append(bands)
        out.signatures.append(sigs)

    def publish(
        self,
        out: StreamResult,
        index: DedupIndex | None,
        writer: BatchWriter,
        exclusion_records: ExclusionRecords,
        attempt: str,
        write_manifest: Callable[[], T],
        read_back: Callable[[], T | None],
    ) -> T:
        """Reserve the batch in the index as `attempt`, write the exclusion sink, then `write_manifest()` (which
        must name `attempt`), then make the index rows visible. A failure before the manifest removes the
        attempt's rows and objects. A manifest write that raises may still have been applied (its answer lost, or
        a cancel landing during it): `read_back()` (the stored publication if it names `attempt`, else None)
        decides, so the objects a stored manifest names are never deleted (`_settle`)."""
        uses_index = index is not None and self.config.dedup.scope == "global"
        try:
            self.commit(out, index, writer, exclusion_records, attempt=attempt)
            writer.upload_exclusions()
            if uses_index:
                index.confirm(attempt)
        except BaseException:
            if uses_index:
                index.abandon(attempt)
            writer.abort()
            raise
        try:
            published = write_manifest()
        except BaseException as exc:  # noqa: BLE001 - a cancel too may land while the PUT is applied
            published = _settle(exc, read_back, index if uses_index else None, writer, attempt)
        if uses_index:
            index.publish(attempt)
        return published

    def _write_index(self, out: StreamResult, index: DedupIndex, attempt: str | None) -> tuple[dict, dict, dict]:
        """Reserve the batch as `attempt` (or commit it at once) and record its copies before it is published:
        returns the late drops {row: reason}, {doc_id: reason} and the kept documents' copy counts."""
        cfg = self.config.dedup.minhash
        empty_bands = np.zeros((0, cfg.num_buckets), dtype=np.uint64)
        empty_sigs = np.zeros((0, cfg.num_buckets * cfg.hashes_per_bucket), dtype=np.uint32)
        rows = (
            out.doc_ids,
            np.concatenate(out.exact) if out.exact else np.zeros(0, dtype=np.uint64),
            np.concatenate(out.bands) if out.bands else empty_bands,
            np.concatenate(out.signatures) if out.signatures else empty_sigs,
        )
        threshold = signature_threshold(cfg)
        late_ids: dict[str, str] = {}
        copies: dict[str, tuple[int, int]] = {}

        def settle(pending: str, late: dict[int, str]) -> None:
            late_ids.update({out.doc_ids[i]: reason for i, reason in late.items()})
            copies.update(batch_copies(out.batch_id, out.copies, out.doc_ids, late_ids, index, pending))

        if attempt is None:
            late = index.commit_batch(out.batch_id, *rows, near_threshold=threshold, before_publish=settle)
        else:
            late = index.reserve_batch(out.batch_id, attempt, *rows, near_threshold=threshold)
            settle(attempt, late)
        return late, late_ids, copies

    def commit(
        self,
        out: StreamResult,
        index: DedupIndex | None,
        writer: BatchWriter,
        exclusion_records: ExclusionRecords,
        attempt: str | None = None,
    ) -> bool:
        """Write the batch to the cross-batch index (reserve it as `attempt` when given, else commit it at once);
        retract and exclude what another batch published first. Returns whether the index was written."""
        if index is None or self.config.dedup.scope != "global":
            writer.set_outcome({}, batch_copies(out.batch_id, out.copies, out.doc_ids, {}))
            return False
        late, late_ids, copies = self._write_index(out, index, attempt)
        # one index_commit row per profile, so each profile's table still adds up
        stats_of: dict[str, StepStats] = {}
        for domain in out.domains:
            stats_of.setdefault(domain, StepStats("index_commit", profile=domain)).docs_in += 1
        for i in late:
            stats_of[out.domains[i]].dropped += 1
        writer.set_outcome(late_ids, copies)
        if late:
            ids = {out.doc_ids[i] for i in late}
            writer.retract(ids)
            dropped = [
                Dropped(
                    id=out.doc_ids[i],
                    source="",
                    step="index_commit",
                    reason=reason,
                    text="",
                    meta={"domain": out.domains[i]},
                )
                for i, reason in sorted(late.items())
            ]
            writer.add_excluded(exclusion_records(dropped, []))
            for i, d in zip(sorted(late), dropped):
                stats_of[out.domains[i]].reasons[d.reason.split("_of:", 1)[0]] += 1
                out.dropped_by_reason[f"index_commit:{d.reason.split(':', 1)[0]}"] += 1
            out.counts["kept"] -= len(late)
            out.counts["dropped"] += len(late)
        out.add_stats(list(stats_of.values()))
        out.check_counts()
        return True


def _settle(exc: BaseException, read_back: Callable[[], T | None], index: DedupIndex | None, writer, attempt: str) -> T:
    """After `write_manifest` raised `exc`: the stored publication if the manifest names `attempt` (a cancel is
    raised again once the rows are published: the run still ends as canceled); otherwise remove what the attempt
    wrote and raise. When S3 does not answer the read-back either, nothing is deleted: the attempt stays pending
    and the next `begin_batch` resolves it from whatever manifest is stored."""
    try:
        stored = read_back()
    except Exception as err:  # noqa: BLE001 - unknown is not absent: keep everything, raise the first failure
        log.warning(
            "batch attempt %s: manifest write failed (%s) and reading it back failed too (%s); its "
            "objects are kept, the index resolves it later",
            attempt,
            exc,
            err,
        )
        raise exc from None
    if stored is None:
        if index is not None:
            index.abandon(attempt)
        writer.abort()
        raise exc
    log.warning("batch attempt %s: the manifest write raised (%s) but the manifest is stored: published", attempt, exc)
    if not isinstance(exc, Exception):
        if index is not None:
            index.publish(attempt)
        raise exc
    return stored
