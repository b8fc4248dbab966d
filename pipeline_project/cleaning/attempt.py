"""One attempt at cleaning a batch and publishing its shards, as the `cleaned_shards` asset runs it.

An attempt (run and try) writes under prefixes of its own; what was published before stays until the new manifest
replaces it. Order: clean (index lookups only) -> `before_publish(manifest)` (the caller refuses there, e.g. when
the ledger holds other content) -> reserve in the index (pending, first writer wins; late drops change the
content) -> exclusion sink -> `before_publish(final manifest)` -> manifest -> index rows visible.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pipeline_project.cleaning.chain.pool import FilterPool
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup.blocklist import Blocklist
from pipeline_project.cleaning.dedup.index import DedupIndex
from pipeline_project.cleaning.output import publish
from pipeline_project.cleaning.output.writer import BatchWriter
from pipeline_project.cleaning.stream import ExclusionRecords, StreamingCleaner, StreamResult


@dataclass(frozen=True)
class BatchAttempt:
    """Where and how one attempt cleans `batch_id` (`manifest` is the batch's input manifest)."""

    client: Any
    bucket: str
    batch_id: str
    config: CleaningConfig
    manifest: Any
    shard_dir: str
    exclusions_dir: str
    attempt: str
    max_shard_bytes: int
    workers: int
    chunk_docs: int
    chunk_bytes: int
    blocklist: Blocklist | None = None  # the takedown blocklist (`dedup.blocklist`); None: none consulted

    def writer(self) -> BatchWriter:
        return BatchWriter(
            self.client,
            self.bucket,
            shard_prefix=f"{self.shard_dir}{self.attempt}/",
            exclusions_key=f"{self.exclusions_dir}{self.attempt}/{publish.EXCLUSIONS_NAME}",
            max_shard_bytes=self.max_shard_bytes,
        )

    def shard_manifest(self, out: StreamResult, writer: BatchWriter, attempt: str = "") -> publish.ShardManifest:
        shards = writer.finish_shards()
        return publish.ShardManifest(
            batch_id=self.batch_id,
            config_version=self.config.version,
            config_hash=self.config.config_hash(),
            input_keys=tuple(o.key for o in self.manifest.objects),
            counts={k: int(out.counts[k]) for k in ("in", "kept", "dropped", "quarantined")},
            shards=tuple(
                publish.ShardEntry(key=s.key, docs=s.docs, raw_bytes=s.raw_bytes, bytes=s.bytes, sha256=s.sha256)
                for s in shards
            ),
            exclusions=writer.exclusions_key,
            dedup_attempt=attempt,
            attributes=writer.attributes_key if writer.attributes_sha256 else "",
            attributes_sha256=writer.attributes_sha256,
        )


@dataclass(frozen=True)
class AttemptOutcome:
    out: StreamResult
    published: Any  # what `publish.write_manifest` returned
    traffic: Any  # the index's traffic counters, None when it keeps none

    @property
    def manifest(self) -> publish.ShardManifest:
        return self.published.manifest


def clean_attempt(
    run: BatchAttempt,
    index: DedupIndex | None,
    items: Iterable,
    records: ExclusionRecords,
    before_publish: Callable[[publish.ShardManifest], None],
    previous: publish.ShardManifest | None = None,
) -> AttemptOutcome:
    """Clean `items` into the attempt's shards, call `before_publish` with the would-be manifest, then publish,
    calling it again with the manifest about to be written (after the index's late drops). Closes `index`; on any
    failure before publishing, removes what the attempt wrote."""
    writer = run.writer()
    try:
        cleaner, out = _clean(run, index, items, writer, records)
        before_publish(run.shard_manifest(out, writer))
    except BaseException:
        writer.abort()
        index.close()
        raise

    def write_manifest() -> publish.PublishedBatch:
        final = run.shard_manifest(out, writer, run.attempt)
        before_publish(final)  # again: the index's late drops may have changed what the batch holds
        return publish.write_manifest(run.client, run.bucket, run.shard_dir, frozen_counts(final, previous))

    try:
        published = cleaner.publish(
            out,
            index,
            writer,
            records,
            run.attempt,
            write_manifest,
            lambda: publish.read_published(run.client, run.bucket, run.shard_dir, run.attempt),
        )
    finally:
        traffic = getattr(index, "traffic", None)
        index.close()
    if published.manifest.attributes != writer.attributes_key and writer.attributes_sha256:
        run.client.delete_object(Bucket=run.bucket, Key=writer.attributes_key)  # frozen counts kept: not named
    return AttemptOutcome(out, published, traffic)


def frozen_counts(final: publish.ShardManifest, previous: publish.ShardManifest | None) -> publish.ShardManifest:
    """A re-clean that leaves the batch's content as it was keeps the attribute file of the publication it replaces:
    the duplicate-cluster counts in it grow as other batches publish, and the rehydration weights `token_blocks`
    derives from them (part of the ledger fingerprint) must stay those the batch was first produced with."""
    if previous is None or not previous.attributes or previous.content_hash() != final.content_hash():
        return final
    return final.model_copy(update={"attributes": previous.attributes, "attributes_sha256": previous.attributes_sha256})


def _clean(
    run: BatchAttempt, index: DedupIndex | None, items: Iterable, writer: BatchWriter, records: ExclusionRecords
) -> tuple[StreamingCleaner, StreamResult]:
    with FilterPool(run.config, run.workers) if run.workers > 1 else contextlib.nullcontext() as pool:
        cleaner = StreamingCleaner(run.config, pool, run.chunk_docs, run.chunk_bytes, run.blocklist)
        writer.attributes = cleaner.attribute_writer()  # every document's decision and signals (Parquet)
        try:
            return cleaner, cleaner.run(items, run.batch_id, index, writer, records)
        finally:
            if run.blocklist is not None:
                run.blocklist.close()
