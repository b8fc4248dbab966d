"""FineWeb-2 rehydration: weights from duplicate-cluster counts frozen in a batch's attribute file, the weighted
document stream, and the token path that repeats each document by its weight (pure logic, no services)."""

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_project.cleaning.dedup.rehydration import (
    RehydrationConfig,
    batch_weights,
    cluster_size,
    fingerprint,
    iter_weighted_documents,
    weight,
    weight_table,
    with_weights,
)
from pipeline_project.cleaning.output.publish import ShardEntry, ShardManifest
from pipeline_project.cleaning.output.shards import write_shards
from pipeline_project.cleaning.records import Document
from pipeline_project.streaming.kafka.spans import SpanRecorder
from pipeline_project.streaming.produce.packing import DomainPackers
from pipeline_project.streaming.produce.request import ProducerConfig
from pipeline_project.streaming.produce.tokenize import StageTimer, packing_hash, timed_blocks
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

ON = RehydrationConfig(enabled=True)


def test_fineweb2_weights_upsample_moderate_clusters_not_huge_ones():
    sizes = [1, 2, 3, 4, 5, 99, 100, 999, 1000, 50_000]
    assert [weight(n, ON) for n in sizes] == [1, 2, 3, 3, 5, 5, 8, 8, 1, 1]
    assert all(weight(n) == 1 for n in sizes)  # off by default


def test_cluster_size_table_and_weighted_records():
    assert cluster_size(2, 1) == 4 and cluster_size(2, 1, count_near=False) == 3
    table = weight_table({"a": (0, 0), "b": (1, 0), "c": (2, 2)}, ON)
    assert table == {"a": 1, "b": 2, "c": 5}
    records = [{"id": i, "text": i.upper(), "domain": "web"} for i in ("a", "b", "x")] + [{"id": "c", "text": "C"}]
    out = list(with_weights(records, table))
    # a weight-1 document is exactly today's (domain, text); a repeated one carries its weight
    assert out == [("web", "A"), ("web", "B", 2), ("web", "X"), (None, "C", 5)]


def _batch(copies: dict[str, tuple[int, int]], kept: list[str], dropped: list[str] = ()):
    """A published batch in memory: one shard of `kept` and an attribute file with their copy counts."""
    client = MemoryS3Client({})
    docs = [Document(id=d, text=f"text of {d}", source="raw/x", meta={"domain": "web"}) for d in kept]
    shard = write_shards(docs)[0]
    client.put_object(Bucket="b", Key="shards/x/s0.jsonl.zst", Body=shard.data)
    rows = [{"doc_id": d, "decision": "kept", "copies_exact": copies.get(d, (0, 0))[0],
             "copies_near": copies.get(d, (0, 0))[1]} for d in kept]  # fmt: skip
    rows += [{"doc_id": d, "decision": "dropped", "copies_exact": None, "copies_near": None} for d in dropped]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    data = sink.getvalue().to_pybytes()
    client.put_object(Bucket="b", Key="shards/x/attributes.parquet", Body=data)
    entry = ShardEntry(key="shards/x/s0.jsonl.zst", docs=shard.docs, raw_bytes=shard.raw_bytes, bytes=len(shard.data),
                       sha256=hashlib.sha256(shard.data).hexdigest())  # fmt: skip
    manifest = ShardManifest(batch_id="x", config_version=1, config_hash="cfg", input_keys=("raw/x",),
                             counts={"in": len(kept)}, shards=(entry,), exclusions="excl",
                             attributes="shards/x/attributes.parquet",
                             attributes_sha256=hashlib.sha256(data).hexdigest())  # fmt: skip
    return client, manifest


def test_weights_are_frozen_from_the_batch_attribute_file():
    client, manifest = _batch({"d1": (1, 0), "d2": (2, 2), "d3": (0, 0)}, ["d0", "d1", "d2", "d3"], ["d4"])
    weights = batch_weights(client, "b", manifest, ON)
    assert weights == {"d1": 2, "d2": 5}  # only documents that repeat
    assert batch_weights(client, "b", manifest, RehydrationConfig(enabled=True, count_near=False)) == {
        "d1": 2,
        "d2": 3,
    }
    docs = list(iter_weighted_documents(client, "b", manifest, weights))
    assert [d[2] if len(d) == 3 else 1 for d in docs] == [1, 2, 5, 1]
    assert docs[0] == ("web", "text of d0")


def test_a_batch_without_an_attribute_file_or_with_another_one_is_refused_in_one_line():
    client, manifest = _batch({"d1": (1, 0)}, ["d0", "d1"])
    bare = ShardManifest(batch_id="x", config_version=1, config_hash="cfg", input_keys=(), counts={},
                         shards=manifest.shards, exclusions="excl")  # fmt: skip
    with pytest.raises(ValueError, match="no attribute file") as err:
        batch_weights(client, "b", bare, ON)
    assert "\n" not in str(err.value)
    client.put_object(Bucket="b", Key=manifest.attributes, Body=b"changed")
    with pytest.raises(ValueError, match="sha256"):
        batch_weights(client, "b", manifest, ON)


def test_the_fingerprint_names_the_knob_and_the_frozen_weights():
    assert fingerprint(RehydrationConfig(), {"d1": 2}) == ""  # off: today's ledger fingerprint
    on = fingerprint(ON, {"d1": 2})
    assert on.startswith("rehydrate:") and on == fingerprint(ON, {"d1": 2})
    assert on != fingerprint(ON, {"d1": 3}) and on != fingerprint(ON, {}) != ""
    fim_only = ProducerConfig(fim={"domains": {"code": {"rate": 0.1}}})
    assert packing_hash(ProducerConfig()) == ""
    assert packing_hash(fim_only) == fim_only.fim.fingerprint()
    both = packing_hash(fim_only.model_copy(update={"rehydration": on}))
    assert both == f"{fim_only.fim.fingerprint()}+{on}"
    assert packing_hash(ProducerConfig(rehydration=on)) == on


class _Tokenizer:
    eos_id = 0

    @staticmethod
    def encode_batch(texts):
        return [np.array([len(w) for w in t.split()], dtype=np.uint32) for t in texts]


def _blocks(docs, seq_len=4, rehydration=""):
    packer, spans = DomainPackers(seq_len, eos_id=0), SpanRecorder(seq_len)
    config = ProducerConfig(prefetch_batches=0, text_batch_docs=2, rehydration=rehydration)
    items = list(timed_blocks(docs, _Tokenizer(), packer, config, StageTimer(), spans))
    return np.concatenate([b for _d, b in items]), packer, spans


def test_the_token_path_repeats_each_document_by_its_weight_and_spans_name_it_each_time():
    plain = [("web", "aa bbb"), ("web", "c"), ("code", "dddd e")]
    weighted = [("web", "aa bbb"), ("web", "c", 3), ("code", "dddd e", 2)]
    blocks, packer, spans = _blocks(weighted, rehydration="rehydrate:test")
    tokens = [int(t) for t in blocks[blocks != 0xFFFFFFFF]]
    # web: [2 3] EOS, then [1] EOS three times; code: [4 1] EOS twice (each block is one domain's)
    assert sorted(tokens) == sorted([2, 3, 0, 1, 0, 1, 0, 1, 0, 4, 1, 0, 4, 1, 0])
    per = packer.per_domain()
    assert per["web"]["docs"] == 2 and per["web"]["rehydrated_docs"] == 1 and per["web"]["rehydration_copies"] == 2
    assert per["code"]["docs"] == 1 and per["code"]["rehydration_copies"] == 1
    assert packer.stats()["docs"] == 3 and packer.stats()["rehydration_copies"] == 3
    web = spans.take("web", 3)
    assert [(s.ordinal, s.first, s.count) for s in web] == [(0, 0, 3), (1, 0, 2), (1, 0, 2), (1, 0, 2)]
    # off (weight 1 everywhere): today's blocks and counters, no rehydration keys
    off, off_packer, _ = _blocks(plain)
    again, _, _ = _blocks([d[:2] for d in weighted])
    assert np.array_equal(off, again) and "rehydration_copies" not in off_packer.stats()
    with pytest.raises(ValueError, match="rehydration weight"):
        _blocks(weighted)  # a weight without the knob's fingerprint would change blocks the ledger cannot tell
