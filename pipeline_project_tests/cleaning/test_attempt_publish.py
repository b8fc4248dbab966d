"""One batch attempt publishes only what every refusal has seen, and a manifest whose answer was lost is settled by
reading it back, never by deleting what it names (issue 37 findings 4 and 7)."""

from __future__ import annotations

import pytest

from pipeline_project.cleaning.attempt import BatchAttempt, clean_attempt
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.output import publish
from pipeline_project.ingest.manifest import BatchManifest, RawObject
from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project_tests.cleaning.test_dedup_store import CONFIG, _corpus, _docs
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client


class LateDrop(MemoryDedupIndex):
    """Another batch published the first kept document while this one was cleaning: the reserve drops it late."""

    def reserve_batch(self, batch_id, attempt, doc_ids, *args, **kwargs):
        super().reserve_batch(batch_id, attempt, doc_ids, *args, **kwargs)
        return {0: "exact_duplicate_of:other/doc-1"}


def _attempt(client) -> BatchAttempt:
    manifest = BatchManifest(batch_id="x", bucket="b", objects=(RawObject(key="raw/x", etag="e", size=1,
                             last_modified="2026-12-07T00:00:00+00:00"),))  # fmt: skip
    return BatchAttempt(client=client, bucket="b", batch_id="x", config=CONFIG, manifest=manifest,
                        shard_dir="shards/x/", exclusions_dir="exclusions/x/", attempt="a1", max_shard_bytes=1 << 20,
                        workers=0, chunk_docs=100, chunk_bytes=1 << 20)  # fmt: skip


def _records(dropped, quarantined):
    return [{"id": d.id, "reason": d.reason} for d in dropped] + [{"id": q.id, "reason": q.reason} for q in quarantined]


def test_the_ledger_refusal_sees_the_content_the_index_leaves():
    """Finding 7: the refusal ran before the index's late drops; the manifest finally published (other content)
    was never checked, and token_blocks then failed on it for good."""
    client = MemoryS3Client({})
    seen: list[str] = []

    def ledger_holds_the_first_content(manifest: publish.ShardManifest) -> None:
        seen.append(manifest.content_hash())
        if manifest.content_hash() != seen[0]:
            raise LedgerConflictError(f"ledger holds {seen[0][:12]}, the batch now {manifest.content_hash()[:12]}")

    with pytest.raises(LedgerConflictError):
        clean_attempt(_attempt(client), LateDrop(), _docs("x", _corpus(31, 5)), _records,
                      ledger_holds_the_first_content)  # fmt: skip
    assert len(seen) == 2 and seen[0] != seen[1]
    assert publish.read_shard_manifest_or_none(client, "b", "shards/x/") is None  # nothing published
    assert not [k for _, k in client.objects if k.startswith("shards/x/a1/")]  # and nothing left behind


class AppliedThenRaises(MemoryS3Client):
    """A manifest PUT that reaches the store, then raises: its answer lost (botocore's attempts spent) or a cancel
    landing during it."""

    def __init__(self, objects, error: BaseException):
        super().__init__(objects)
        self.error = error

    def put_object(self, Bucket: str, Key: str, Body: bytes, **kw):
        answer = super().put_object(Bucket=Bucket, Key=Key, Body=Body, **kw)
        if Key.endswith(publish.MANIFEST_NAME):
            raise self.error
        return answer


@pytest.mark.parametrize("error", [ConnectionError("answer lost"), KeyboardInterrupt()], ids=["lost", "cancel"])
def test_a_manifest_write_that_raised_but_was_applied_keeps_what_it_names(error):
    """Finding 4: `abandon` published the attempt (its manifest names it), then `writer.abort()` deleted every
    shard that manifest names."""
    client = AppliedThenRaises({}, error)
    index = MemoryDedupIndex()
    docs = _docs("x", _corpus(32, 5))
    if isinstance(error, Exception):
        outcome = clean_attempt(_attempt(client), index, docs, _records, lambda m: None)
        manifest = outcome.manifest
    else:
        with pytest.raises(KeyboardInterrupt):  # the run still ends as canceled
            clean_attempt(_attempt(client), index, docs, _records, lambda m: None)
        manifest = publish.read_shard_manifest(client, "b", "shards/x/")
    assert manifest.dedup_attempt == "a1" and manifest.counts["kept"] == 5
    assert publish.verify_published(client, "b", manifest) == []  # every shard it names is there
    assert len(index.doc_ids) == 5  # and its documents are in the index, published
