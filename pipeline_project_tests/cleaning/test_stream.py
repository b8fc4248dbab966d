"""Chunked cleaning: the same decisions as one pass, duplicates found across chunks, bounded shard writing."""

from __future__ import annotations

import copy

import pytest

from pipeline_project.cleaning import read_shard
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.output.writer import BatchWriter
from pipeline_project.cleaning.stream import StreamingCleaner
from pipeline_project_harness.standins import WholeBatchPipeline
from pipeline_project_tests.cleaning.test_dedup_store import CONFIG, _corpus, _docs, _edit
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client


def _records(dropped, quarantined):
    return [{"id": d.id, "step": d.step, "reason": d.reason} for d in dropped] + [
        {"id": q.id, "step": "read", "reason": q.reason} for q in quarantined
    ]


def _run(docs, chunk_docs, index=None, max_shard_bytes=1 << 20):
    client = MemoryS3Client({})
    writer = BatchWriter(client, "b", "shards/x/attempt/", "exclusions/x/excluded.jsonl.zst", max_shard_bytes)
    cleaner = StreamingCleaner(CONFIG, chunk_docs=chunk_docs)
    index = index if index is not None else MemoryDedupIndex()
    out = cleaner.run(docs, "x", index, writer, _records)
    shards = writer.finish_shards()
    cleaner.commit(out, index, writer, _records)
    writer.upload_exclusions()
    kept = [r["id"] for s in writer.shards for r in read_shard(client.get_object(Bucket="b", Key=s.key)["Body"].read())]
    return out, kept, shards


def test_one_chunk_decides_exactly_as_one_pass():
    texts = _corpus(20, 8)
    texts += [texts[0], _edit(texts[1], 40, 6, 123_000)]
    docs = _docs("x", texts)
    single = WholeBatchPipeline(CONFIG).run(copy.deepcopy(docs), "x", MemoryDedupIndex())
    out, kept, _ = _run(copy.deepcopy(docs), chunk_docs=1000)
    assert kept == [d.id for d in single.kept]
    assert out.counts["dropped"] == len(single.dropped) == 2


def test_duplicates_are_found_across_chunks_and_counts_add_up():
    base = _corpus(21, 6)
    texts = base + [base[2], _edit(base[3], 100, 5, 456_000), *_corpus(22, 3)]
    out, kept, shards = _run(_docs("x", texts), chunk_docs=4, max_shard_bytes=6000)
    assert out.chunks == 3
    assert sorted(kept) == sorted(f"x-{i}" for i in range(len(texts)) if i not in (6, 7))
    reasons = sorted(r for r in out.dropped_by_reason)
    assert reasons == ["exact_dedup:exact_duplicate_of", "minhash_dedup:near_duplicate_of"]
    assert out.counts["in"] == len(texts) == out.counts["kept"] + out.counts["dropped"] + out.counts["quarantined"]
    assert len(shards) > 1, "shards are cut by size while the batch streams"


def test_a_late_duplicate_is_retracted_from_an_uploaded_shard():
    texts = _corpus(23, 5)

    class TakenFirst(MemoryDedupIndex):
        def commit_batch(self, batch_id, doc_ids, *args, before_publish=None, **kwargs):
            late = {1: "exact_duplicate_of:other/doc-9"}  # another batch committed x-1 meanwhile
            before_publish("", late)
            return late

    out, kept, _ = _run(_docs("x", texts), chunk_docs=2, index=TakenFirst(), max_shard_bytes=100)
    assert "x-1" not in kept and len(kept) == 4
    assert out.counts["kept"] == 4 and out.counts["dropped"] == 1
    assert out.dropped_by_reason["index_commit:exact_duplicate_of"] == 1


def test_empty_batch():
    out, kept, shards = _run([], chunk_docs=10)
    assert (out.counts["in"], kept, shards) == (0, [], [])


class RecordingPool:
    """Runs the filters in process, and records when each chunk is handed over and when its output is awaited."""

    def __init__(self, pipeline):
        self.pipeline, self.calls = pipeline, []

    def submit(self, docs, batch_id):
        n = sum(1 for c in self.calls if c[0] == "submit")
        self.calls.append(("submit", n))
        output = self.pipeline.filters.run(docs, batch_id)

        def wait():
            self.calls.append(("wait", n))
            return output

        return wait


def test_with_a_pool_the_next_chunk_is_filtering_while_this_one_is_deduplicated():
    base = _corpus(24, 6)
    texts = base + [base[2], _edit(base[3], 100, 5, 457_000), *_corpus(25, 3)]
    plain_out, plain_kept, _ = _run(_docs("x", copy.deepcopy(texts)), chunk_docs=4)

    client = MemoryS3Client({})
    writer = BatchWriter(client, "b", "shards/x/attempt/", "exclusions/x/excluded.jsonl.zst")
    cleaner = StreamingCleaner(CONFIG, chunk_docs=4)
    cleaner.pipeline.pool = pool = RecordingPool(cleaner.pipeline)
    out = cleaner.run(_docs("x", texts), "x", MemoryDedupIndex(), writer, _records)
    assert pool.calls == [("submit", 0), ("submit", 1), ("wait", 0), ("submit", 2), ("wait", 1), ("wait", 2)]
    assert out.counts == plain_out.counts and out.dropped_by_reason == plain_out.dropped_by_reason
    kept = [
        r["id"]
        for s in writer.finish_shards()
        for r in read_shard(client.get_object(Bucket="b", Key=s.key)["Body"].read())
    ]
    assert kept == plain_kept


def test_a_real_pool_streams_to_the_same_decisions():
    from pipeline_project.cleaning.chain.pool import FilterPool

    base = _corpus(26, 6)
    texts = base + [base[1], _edit(base[4], 100, 5, 458_000), *_corpus(27, 4)]
    plain_out, plain_kept, _ = _run(_docs("x", copy.deepcopy(texts)), chunk_docs=3)
    client = MemoryS3Client({})
    writer = BatchWriter(client, "b", "shards/x/attempt/", "exclusions/x/excluded.jsonl.zst")
    with FilterPool(CONFIG, workers=2) as pool:
        cleaner = StreamingCleaner(CONFIG, pool=pool, chunk_docs=3)
        out = cleaner.run(_docs("x", texts), "x", MemoryDedupIndex(), writer, _records)
    kept = [
        r["id"]
        for s in writer.finish_shards()
        for r in read_shard(client.get_object(Bucket="b", Key=s.key)["Body"].read())
    ]
    assert out.chunks == 4 and kept == plain_kept and "x-6" not in kept and "x-7" not in kept
    assert out.counts == plain_out.counts and out.dropped_by_reason == plain_out.dropped_by_reason


def test_a_duplicate_any_number_of_chunks_later_is_found():
    # a regression: each chunk's keys used to replace the batch's earlier chunks in the local index, so a copy
    # two or more chunks after its original was kept
    base = _corpus(26, 6)
    texts = base + [base[1], _edit(base[4], 100, 5, 458_000), *_corpus(27, 4), base[0]]
    whole = [
        d.id for d in WholeBatchPipeline(CONFIG).run(_docs("x", copy.deepcopy(texts)), "x", MemoryDedupIndex()).kept
    ]
    assert {"x-6", "x-7", "x-12"}.isdisjoint(whole)
    for chunk_docs in (1, 2, 3, 5):
        _, kept, _ = _run(_docs("x", copy.deepcopy(texts)), chunk_docs=chunk_docs)
        assert kept == whole, chunk_docs


class RecordingIndex(MemoryDedupIndex):
    """The in-memory index, recording the attempt calls in order."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def reserve_batch(self, batch_id, attempt, *args, **kwargs):
        self.calls.append("reserve")
        return super().reserve_batch(batch_id, attempt, *args, **kwargs)

    def confirm(self, attempt):
        self.calls.append("confirm")

    def publish(self, attempt):
        self.calls.append("publish")
        super().publish(attempt)

    def abandon(self, attempt):
        self.calls.append("abandon")
        super().abandon(attempt)


@pytest.mark.parametrize("manifest_fails", [False, True])
def test_publish_makes_the_index_rows_visible_only_after_the_manifest(manifest_fails):
    client = MemoryS3Client({})
    writer = BatchWriter(client, "b", "shards/x/a1/", "exclusions/x/a1/excluded.jsonl.zst")
    cleaner = StreamingCleaner(CONFIG, chunk_docs=3)
    index = RecordingIndex()
    out = cleaner.run(_docs("x", _corpus(24, 4)), "x", index, writer, _records)
    writer.finish_shards()

    def write_manifest():
        index.calls.append("manifest")
        if manifest_fails:
            raise ConnectionError("S3 went away")
        return "published"

    if manifest_fails:
        with pytest.raises(ConnectionError):
            cleaner.publish(out, index, writer, _records, "a1", write_manifest, lambda: None)
        assert index.calls == ["reserve", "confirm", "manifest", "abandon"]
        assert len(index) == 0 and client.objects == {}  # nothing published; the attempt's shards and sink deleted
    else:
        assert cleaner.publish(out, index, writer, _records, "a1", write_manifest, lambda: None) == "published"
        assert index.calls == ["reserve", "confirm", "manifest", "publish"]
        assert len(index) == 4
