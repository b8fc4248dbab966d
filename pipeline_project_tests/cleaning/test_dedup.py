import random

from pipeline_project.cleaning import CleaningConfig, Document
from pipeline_project.cleaning.config import (
    C4Config,
    DedupConfig,
    FineWebConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    LanguageConfig,
)
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project_harness.standins import WholeBatchPipeline

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
    result = WholeBatchPipeline(_cfg()).run(docs, "b1", None)
    assert [d.id for d in result.kept] == ["k0", "k2"]
    [dropped] = result.dropped
    assert dropped.step == "exact_dedup" and dropped.reason == "exact_duplicate_of:b1/k0"


def test_near_duplicates_cluster_keeps_one():
    base = prose(30, seed=3)
    docs = [_doc(0, base), _doc(1, _edit(base, 0.02, 1)), _doc(2, _edit(base, 0.03, 2)), _doc(3, prose(30, seed=4))]
    result = WholeBatchPipeline(_cfg()).run(docs, "b1", None)
    assert sorted(d.id for d in result.kept) == ["k0", "k3"]
    assert {d.reason for d in result.dropped} == {"near_duplicate_of:b1/k0"}


def test_heavily_edited_text_is_not_a_near_duplicate():
    base = prose(30, seed=5)
    result = WholeBatchPipeline(_cfg()).run([_doc(0, base), _doc(1, _edit(base, 0.5, 1))], "b1", None)
    assert len(result.kept) == 2


def test_cross_batch_duplicate_is_dropped_in_later_batch_naming_the_earlier():
    index = MemoryDedupIndex()
    original, near = prose(20, seed=6), prose(20, seed=7)
    first = WholeBatchPipeline(_cfg()).run([_doc(0, original), _doc(1, near)], "batch-1", index)
    assert len(first.kept) == 2 and index.stats["entries"] == 2
    restored = MemoryDedupIndex.from_bytes(index.to_bytes())  # as if read back from S3
    second = WholeBatchPipeline(_cfg()).run(
        [_doc(5, original), _doc(6, _edit(near, 0.02, 3)), _doc(7, prose(20, seed=8))], "batch-2", restored
    )
    assert [d.id for d in second.kept] == ["k7"]
    reasons = {d.id: d.reason for d in second.dropped}
    assert reasons == {"k5": "exact_duplicate_of:batch-1/k0", "k6": "near_duplicate_of:batch-1/k1"}
    assert restored.stats["entries"] == 3 and restored.stats["batches"] == 2


def test_batch_scope_ignores_earlier_batches_and_rerun_is_idempotent():
    index = MemoryDedupIndex()
    text = prose(20, seed=9)
    WholeBatchPipeline(_cfg()).run([_doc(0, text)], "b1", index)
    again = WholeBatchPipeline(_cfg("batch")).run([_doc(1, text)], "b2", index)
    assert len(again.kept) == 1
    # re-materializing b1 must not find its own earlier run
    rerun = WholeBatchPipeline(_cfg()).run([_doc(0, text)], "b1", index)
    assert len(rerun.kept) == 1 and index.stats["entries"] == 1


def test_index_memory_per_document_is_bounded():
    index = MemoryDedupIndex()
    docs = [_doc(i, prose(12, seed=100 + i)) for i in range(40)]
    WholeBatchPipeline(_cfg()).run(docs, "b1", index)
    stats = index.stats
    assert stats["entries"] == 40
    # 112 uint32 signature + 14 band keys/entries + exact key + id
    assert 600 < stats["bytes_per_doc"] < 1000


# --- MinHash candidates are checked against the kept representative (dedup.minhash.verify) -----------------
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pipeline_project.cleaning.config import MinHashConfig  # noqa: E402
from pipeline_project.cleaning.steps.dedup import MinHasher, jaccard, signature_threshold  # noqa: E402


def _words(n: int, start: int = 0) -> list[str]:
    """n distinct letter-only words (MinHash normalization maps digits to 0), so every 5-gram shingle is unique."""
    out = []
    for k in range(start, start + n):
        w = ""
        k += 26 * 26  # at least three letters
        while k:
            k, r = divmod(k, 26)
            w += "abcdefghijklmnopqrstuvwxyz"[r]
        out.append(w)
    return out


def _replace(words: list[str], start: int, count: int, fresh: int) -> list[str]:
    return words[:start] + _words(count, fresh) + words[start + count :]


def _minhash_cfg(**kw) -> CleaningConfig:
    base = _cfg()
    return base.model_copy(update={"dedup": DedupConfig(minhash=MinHashConfig(**kw))})


def test_jaccard_of_shingle_hash_sets():
    a, b = np.array([1, 2, 3, 4], dtype=np.uint64), np.array([3, 4, 5], dtype=np.uint64)
    assert jaccard(a, b) == pytest.approx(2 / 5)
    assert jaccard(a, a) == 1.0 and jaccard(a[:0], b[:0]) == 0.0


def test_signature_threshold_leaves_two_standard_deviations_below_the_jaccard_threshold():
    assert signature_threshold(MinHashConfig()) == pytest.approx(0.7 - 2 * (0.21 / 112) ** 0.5)
    assert signature_threshold(MinHashConfig(signature_margin_sd=0)) == 0.7


@pytest.mark.parametrize("replaced,dropped", [(52, True), (53, False)])
def test_exact_jaccard_boundary(replaced, dropped):
    # 1004 words -> 1000 shingles; replacing the last k words leaves J = (1000 - k) / (1000 + k):
    # k=52 -> 0.9011, k=53 -> 0.8993. At J ~ 0.9 the 14x8 bands collide with probability > 0.999,
    # so the decision is the exact check's, at threshold 0.9.
    base = _words(1004)
    near = _replace(base, 1004 - replaced, replaced, 5000)
    hasher = MinHasher(MinHashConfig())
    sa, sb = set(hasher.shingles(" ".join(base), "en")), set(hasher.shingles(" ".join(near), "en"))
    assert len(sa & sb) / len(sa | sb) == pytest.approx((1000 - replaced) / (1000 + replaced))
    result = WholeBatchPipeline(_minhash_cfg(jaccard_threshold=0.9)).run(
        [_doc(0, " ".join(base)), _doc(1, " ".join(near))], "b1", None
    )
    assert [d.id for d in result.dropped] == (["k1"] if dropped else [])
    stats = next(s for s in result.step_stats if s.name == "minhash_dedup")
    assert stats.notes["candidates_checked"] == 1 and stats.notes["candidates_rejected"] == (0 if dropped else 1)


def test_chain_drops_only_documents_similar_to_the_kept_representative():
    # A ~ B (J=0.82), B ~ C (J=0.82), but A vs C J=0.67 < 0.7: connected components dropped both B and C;
    # now C, compared with the kept A, stays.
    a = _words(1004)
    b = _replace(a, 904, 100, 5000)
    c = _replace(b, 0, 100, 6000)
    docs = [_doc(0, " ".join(a)), _doc(1, " ".join(b)), _doc(2, " ".join(c))]
    result = WholeBatchPipeline(_cfg()).run(docs, "b1", None)
    assert [d.id for d in result.kept] == ["k0", "k2"]
    assert [(d.id, d.reason) for d in result.dropped] == [("k1", "near_duplicate_of:b1/k0")]
    # DataTrove's rule (any LSH candidate is a duplicate) still chains C onto A
    docs = [_doc(0, " ".join(a)), _doc(1, " ".join(b)), _doc(2, " ".join(c))]
    chained = WholeBatchPipeline(_minhash_cfg(verify="none")).run(docs, "b1", None)
    assert [d.id for d in chained.kept] == ["k0"]
    assert {d.reason for d in chained.dropped} == {"near_duplicate_of:b1/k0"}


def _fake_entry(sig: np.ndarray, bands: np.ndarray, equal_values: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """An index row sharing band 0 with (sig, bands) and exactly `equal_values` of its 112 MinHash values."""
    other = sig.copy()
    change = rng.choice(np.arange(8, sig.size), size=sig.size - equal_values, replace=False)
    other[change] = sig[change] ^ np.uint32(0x5A5A5A5A)
    fake_bands = bands.copy()
    fake_bands[1:] = rng.integers(1, 2**63, size=bands.size - 1, dtype=np.uint64)
    return other, fake_bands


@pytest.mark.parametrize("equal_values,dropped", [(69, True), (68, False), (8, False)])
def test_earlier_batch_candidate_is_checked_by_signature_estimate(equal_values, dropped):
    # earlier batches keep no text: their candidates count when the estimate is >= 0.7 - 2 sd = 0.6134,
    # i.e. 69 of 112 equal values (0.616) but not 68 (0.607) nor a lone colliding band (8/112)
    text = prose(30, seed=11)
    sig, bands = MinHasher(MinHashConfig()).signature(text, "en")
    other, fake_bands = _fake_entry(sig, bands, equal_values, np.random.default_rng(equal_values))
    index = MemoryDedupIndex()
    index.add("old", ["e0"], np.array([1], dtype=np.uint64), fake_bands[None, :], other[None, :])
    result = WholeBatchPipeline(_cfg()).run([_doc(0, text)], "new", index)
    assert [d.reason for d in result.dropped] == (["near_duplicate_of:old/e0"] if dropped else [])


def test_a_value_prepared_ahead_counts_only_for_the_text_it_was_computed_from():
    from pipeline_project.cleaning.steps.base import prepare_ahead, prepared
    from pipeline_project.cleaning.steps.dedup import ExactDedup, exact_key

    step = ExactDedup()
    doc = Document("a", prose(3, seed=1), "s")
    prepare_ahead([step], doc)
    assert prepared(step, doc, lambda: -1) == exact_key(doc.text)
    doc.text = prose(3, seed=2)  # a later step rewrote it: the value is computed again
    assert prepared(step, doc, lambda: -1) == -1
