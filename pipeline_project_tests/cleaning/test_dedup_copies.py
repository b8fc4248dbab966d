"""Duplicate-cluster counts (issue 31 item 4) in the real PostgreSQL index, and the attribute rows they fill."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_project.cleaning.dedup import copies as dedup_copies
from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex
from pipeline_project.cleaning.output.attributes import AttributeWriter
from pipeline_project.cleaning.output.writer import BatchWriter
from pipeline_project.cleaning.stream import StreamingCleaner
from pipeline_project_tests.cleaning.test_dedup_store import CONFIG, _corpus, _docs, _edit
from pipeline_project_tests.cleaning.test_stream import _records
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

A, B, C = _corpus(71, 3)  # three unrelated documents


def _publish(pg_url, batch_id, texts, attempt, fail=False):
    """Clean and publish one batch (chunks of 2) through the pending-attempt protocol; the attribute rows."""
    client = MemoryS3Client({})
    writer = BatchWriter(client, "b", f"shards/{batch_id}/{attempt}/", f"excl/{batch_id}/{attempt}/e.jsonl.zst")
    cleaner = StreamingCleaner(CONFIG, chunk_docs=2)
    writer.attributes = AttributeWriter(CONFIG, [])
    index = PostgresDedupIndex(pg_url, is_published=lambda b, a: False)
    try:
        out = cleaner.run(_docs(batch_id, texts), batch_id, index, writer, _records)
        writer.finish_shards()

        def manifest():
            if fail:
                raise ConnectionError("S3 went away before the manifest")
            return "ok"

        cleaner.publish(out, index, writer, _records, attempt, manifest, lambda: None)  # no manifest stored
    finally:
        index.close()
    data = client.get_object(Bucket="b", Key=writer.attributes_key)["Body"].read()
    return {r["doc_id"]: r for r in pq.read_table(pa.BufferReader(data)).to_pylist()}


def _counts(pg_url, targets):
    index = PostgresDedupIndex(pg_url)
    try:
        return dedup_copies.counts(index, targets)
    finally:
        index.close()


def test_copy_counts_across_batches_and_only_for_published_attempts(pg_url):
    # batch 1: A, 2 exact copies of A (one in the next chunk), a near copy of A; B and its near copy; C alone
    rows = _publish(pg_url, "b1", [A, A, B, A, _edit(A, 10, 12, 9_000_001), _edit(B, 50, 12, 9_000_101), C], "t1")
    assert (rows["b1-0"]["copies_exact"], rows["b1-0"]["copies_near"]) == (2, 1)
    assert (rows["b1-2"]["copies_exact"], rows["b1-2"]["copies_near"]) == (0, 1)
    assert (rows["b1-6"]["copies_exact"], rows["b1-6"]["copies_near"]) == (0, 0)
    assert rows["b1-3"]["dup_of"] == "b1/b1-0" and rows["b1-3"]["dup_kind"] == "exact"
    assert rows["b1-4"]["dup_kind"] == "near" and rows["b1-4"]["decision"] == "dropped"

    # an abandoned attempt of batch 2 (its manifest never written) adds nothing
    with pytest.raises(ConnectionError):
        _publish(pg_url, "b2", [A, A, C], "t2", fail=True)
    assert _counts(pg_url, ["b1/b1-0", "b1/b1-6"]) == {"b1/b1-0": (2, 1), "b1/b1-6": (0, 0)}

    # batch 2 published: two more exact copies of A, a near copy of C; the counts grow
    _publish(pg_url, "b2", [A, A, _edit(C, 100, 12, 9_000_201)], "t3")
    assert _counts(pg_url, ["b1/b1-0", "b1/b1-2", "b1/b1-6"]) == {
        "b1/b1-0": (4, 1),
        "b1/b1-2": (0, 1),
        "b1/b1-6": (0, 1),
    }
    # re-running batch 2 replaces its copies (it does not add them twice)
    _publish(pg_url, "b2", [A, A, _edit(C, 100, 12, 9_000_201)], "t4")
    assert _counts(pg_url, ["b1/b1-0"]) == {"b1/b1-0": (4, 1)}
    # re-running batch 1 sees the copies later batches published (the count so far)
    rows = _publish(pg_url, "b1", [A, A, B, A, _edit(A, 10, 12, 9_000_001), _edit(B, 50, 12, 9_000_101), C], "t5")
    assert (rows["b1-0"]["copies_exact"], rows["b1-0"]["copies_near"]) == (4, 1)


def _commit_at_once(pg_url, batch_id, texts):
    """Clean one batch and commit it with `commit_batch` (no attempt, no manifest: the in-process path)."""
    client = MemoryS3Client({})
    writer = BatchWriter(client, "b", f"shards/{batch_id}/c/", f"excl/{batch_id}/c/e.jsonl.zst")
    writer.attributes = AttributeWriter(CONFIG, [])
    cleaner = StreamingCleaner(CONFIG, chunk_docs=2)
    index = PostgresDedupIndex(pg_url)
    try:
        out = cleaner.run(_docs(batch_id, texts), batch_id, index, writer, _records)
        writer.finish_shards()
        cleaner.commit(out, index, writer, _records)
        writer.upload_exclusions()
    finally:
        index.close()
    data = client.get_object(Bucket="b", Key=writer.attributes_key)["Body"].read()
    return {r["doc_id"]: r for r in pq.read_table(pa.BufferReader(data)).to_pylist()}


def test_copies_are_recorded_on_the_commit_batch_path_too(pg_url):
    rows = _commit_at_once(pg_url, "k1", [A, A, B, _edit(A, 10, 12, 9_000_001), C])
    assert (rows["k1-0"]["copies_exact"], rows["k1-0"]["copies_near"]) == (1, 1)
    assert _counts(pg_url, ["k1/k1-0", "k1/k1-2"]) == {"k1/k1-0": (1, 1), "k1/k1-2": (0, 0)}
    # a later batch committed at once adds its copies; committing it again replaces them
    for _ in range(2):
        _commit_at_once(pg_url, "k2", [A, _edit(B, 50, 12, 9_000_101)])
        assert _counts(pg_url, ["k1/k1-0", "k1/k1-2"]) == {"k1/k1-0": (2, 1), "k1/k1-2": (0, 1)}
    # and a re-run of the first batch sees them as its count so far
    rows = _commit_at_once(pg_url, "k1", [A, A, B, _edit(A, 10, 12, 9_000_001), C])
    assert (rows["k1-0"]["copies_exact"], rows["k1-0"]["copies_near"]) == (2, 1)
