import random

from pipeline_project.cleaning import CleaningConfig, CleaningPipeline, DedupIndex, Document
from pipeline_project.cleaning.config import (
    C4Config,
    DedupConfig,
    FineWebConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    LanguageConfig,
)

from .conftest import prose


def _cfg(scope="global") -> CleaningConfig:
    # only dedup: the crafted docs carry lang in meta, and edits must not trip the quality filters
    return CleaningConfig(
        language=LanguageConfig(enabled=False),
        gopher_quality=GopherQualityConfig(enabled=False),
        gopher_repetition=GopherRepetitionConfig(enabled=False),
        c4=C4Config(enabled=False),
        fineweb=FineWebConfig(enabled=False),
        dedup=DedupConfig(scope=scope),
    )


def _doc(i: int, text: str) -> Document:
    return Document(id=f"k{i}", text=text, source="s", meta={"lang": "en"})


def _edit(text: str, rate: float, seed: int) -> str:
    rng = random.Random(seed)
    words = text.split(" ")
    return " ".join(w if rng.random() > rate else "zebra" for w in words)


def test_exact_duplicates_within_batch_ignore_case_and_whitespace():
    base = prose(12, seed=1)
    docs = [_doc(0, base), _doc(1, base.upper().replace(" ", "  ")), _doc(2, prose(12, seed=2))]
    result = CleaningPipeline(_cfg()).run(docs, "b1", None)
    assert [d.id for d in result.kept] == ["k0", "k2"]
    [dropped] = result.dropped
    assert dropped.step == "exact_dedup" and dropped.reason == "exact_duplicate_of:b1/k0"


def test_near_duplicates_cluster_keeps_one():
    base = prose(30, seed=3)
    docs = [_doc(0, base), _doc(1, _edit(base, 0.02, 1)), _doc(2, _edit(base, 0.03, 2)), _doc(3, prose(30, seed=4))]
    result = CleaningPipeline(_cfg()).run(docs, "b1", None)
    assert sorted(d.id for d in result.kept) == ["k0", "k3"]
    assert {d.reason for d in result.dropped} == {"near_duplicate_of:b1/k0"}


def test_heavily_edited_text_is_not_a_near_duplicate():
    base = prose(30, seed=5)
    result = CleaningPipeline(_cfg()).run([_doc(0, base), _doc(1, _edit(base, 0.5, 1))], "b1", None)
    assert len(result.kept) == 2


def test_cross_batch_duplicate_is_dropped_in_later_batch_naming_the_earlier():
    index = DedupIndex()
    original, near = prose(20, seed=6), prose(20, seed=7)
    first = CleaningPipeline(_cfg()).run([_doc(0, original), _doc(1, near)], "batch-1", index)
    assert len(first.kept) == 2 and index.stats["entries"] == 2
    restored = DedupIndex.from_bytes(index.to_bytes())  # as if read back from S3
    second = CleaningPipeline(_cfg()).run(
        [_doc(5, original), _doc(6, _edit(near, 0.02, 3)), _doc(7, prose(20, seed=8))], "batch-2", restored)
    assert [d.id for d in second.kept] == ["k7"]
    reasons = {d.id: d.reason for d in second.dropped}
    assert reasons == {"k5": "exact_duplicate_of:batch-1/k0", "k6": "near_duplicate_of:batch-1/k1"}
    assert restored.stats["entries"] == 3 and restored.stats["batches"] == 2


def test_batch_scope_ignores_earlier_batches_and_rerun_is_idempotent():
    index = DedupIndex()
    text = prose(20, seed=9)
    CleaningPipeline(_cfg()).run([_doc(0, text)], "b1", index)
    again = CleaningPipeline(_cfg("batch")).run([_doc(1, text)], "b2", index)
    assert len(again.kept) == 1
    # re-materializing b1 must not find its own earlier run
    rerun = CleaningPipeline(_cfg()).run([_doc(0, text)], "b1", index)
    assert len(rerun.kept) == 1 and index.stats["entries"] == 1


def test_index_memory_per_document_is_bounded():
    index = DedupIndex()
    docs = [_doc(i, prose(12, seed=100 + i)) for i in range(40)]
    CleaningPipeline(_cfg()).run(docs, "b1", index)
    stats = index.stats
    assert stats["entries"] == 40
    # 112 uint32 signature + 14 band keys/entries + exact key + id
    assert 600 < stats["bytes_per_doc"] < 1000
