"""Takedowns in pure logic: a text's near copies through the dedup index (the cleaning's MinHash rule, not
transitive), dropped copies by reason and by text, a copy's blocks from the spans header and the ranges retracted,
the exposure read from a step log, and the cleaning dropping a blocked re-upload as `blocked:<request>`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pipeline_project.cleaning import CleaningConfig, Document
from pipeline_project.cleaning.chain.chain import CleaningPipeline
from pipeline_project.cleaning.dedup.blocklist import BlockEntry, MemoryBlocklist
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.ops.takedown.blocklist import entries
from pipeline_project.ops.takedown.blocks import BlockHit, block_ranges, hits_in_message, ordinals_of
from pipeline_project.ops.takedown.exposure import exposures_in_steps, first_exposures
from pipeline_project.ops.takedown.resolve import dropped_copies, fingerprints, kept_copies
from pipeline_project.streaming.kafka.spans import Span
from pipeline_project_tests.cleaning.test_dedup import _words

CONFIG = CleaningConfig.model_validate(
    {name: {"enabled": False} for name in ("language", "gopher_quality", "gopher_repetition", "c4", "fineweb")}
)
CFG = CONFIG.dedup.minhash
BASE = _words(300, 0)
TEXT = " ".join(BASE)
FIRST = " ".join(BASE[:255] + _words(45, 5000))  # the last 15% replaced: near TEXT
SECOND = " ".join(_words(45, 7000) + BASE[45:])  # the first 15% replaced: near TEXT, not near FIRST
OTHER = " ".join(_words(300, 9000))


def _commit(index: MemoryDedupIndex, batch: str, docs: dict[str, str]) -> None:
    prints = [fingerprints([(doc, text)], CONFIG)[0] for doc, text in docs.items()]
    index.commit_batch(
        batch,
        list(docs),
        np.array([p.exact for p in prints], dtype=np.uint64),
        np.array([p.bands for p in prints], dtype=np.uint64),
        np.array([p.signature for p in prints], dtype=np.uint32),
        near_threshold=CFG.jaccard_threshold,
    )


def test_a_text_resolves_to_its_near_copies_in_every_batch_but_not_to_a_copy_of_a_copy():
    index = MemoryDedupIndex(num_perm=CFG.num_buckets * CFG.hashes_per_bucket, num_bands=CFG.num_buckets)
    _commit(index, "b1", {"first": FIRST, "other": OTHER})
    _commit(index, "b2", {"second": SECOND})
    prints = fingerprints([("text", TEXT)], CONFIG)
    copies = kept_copies(index, prints, CFG)
    assert [(c.ref, c.kind, c.state) for c in copies] == [("b1/first", "near", "kept"), ("b2/second", "near", "kept")]
    assert all(0.6 < c.similarity < 1.0 for c in copies)
    # FIRST and SECOND are each near the text, not near each other: a takedown of FIRST finds FIRST alone
    assert [c.ref for c in kept_copies(index, fingerprints([("t", FIRST)], CONFIG), CFG)] == ["b1/first"]
    exact = kept_copies(index, fingerprints([("t", FIRST)], CONFIG), CFG)[0]
    assert exact.kind == "exact" and exact.similarity == 1.0


def test_dropped_copies_by_drop_reason_and_by_text():
    index = MemoryDedupIndex(num_perm=CFG.num_buckets * CFG.hashes_per_bucket, num_bands=CFG.num_buckets)
    _commit(index, "b1", {"first": FIRST})
    prints = fingerprints([("text", TEXT)], CONFIG)
    kept = kept_copies(index, prints, CFG)
    records = [
        ("b1", {"id": "dup", "kind": "dropped", "reason": "exact_duplicate_of:b1/first", "text": "masked"}),
        ("b3", {"id": "same", "kind": "dropped", "reason": "gopher_quality:short", "text": TEXT}),
        ("b3", {"id": "unrelated", "kind": "dropped", "reason": "near_duplicate_of:b9/x", "text": OTHER}),
        ("b3", {"id": "q", "kind": "quarantined", "reason": "bad_utf8"}),
    ]
    found = dropped_copies(records, kept, prints, CONFIG)
    assert [(c.ref, c.kind, c.reason) for c in found] == [
        ("b1/dup", "exact", "exact_duplicate_of:b1/first"),
        ("b3/same", "exact", "gopher_quality:short"),
    ]


def test_a_copys_blocks_come_from_the_spans_and_merge_into_ranges():
    # seq_len 4: ordinal 0 has 6 tokens (blocks 0-1), ordinal 1 has 5 (blocks 1-2), ordinal 2 has 5 (blocks 2-3)
    spans = [Span(0, 0, 6, False), Span(1, 0, 5, False), Span(2, 0, 5, False)]
    message = SimpleNamespace(batch="b1", partition=2, offset=40, seq_len=4, blocks=np.zeros((4, 4)), spans=spans)
    hits = hits_in_message(message, {1: "doc-1"})
    assert [(h.block, h.tokens) for h in hits] == [(1, 2), (2, 3)]
    ranges = block_ranges([*hits, BlockHit("b1", "d", 2, 41, 0, 4), BlockHit("b1", "d", 2, 40, 3, 1)])
    assert [(r.partition, r.offset, r.first, r.end) for r in ranges] == [(2, 40, 1, 4), (2, 41, 0, 1)]
    assert ordinals_of([{"id": "a"}, {"id": "doc-1"}, {"id": "c"}], ["doc-1"]) == {1: "doc-1"}


def test_the_exposure_names_the_steps_and_ranks_whose_runs_cover_a_block():
    hits = [BlockHit("b1", "first", 0, 7, 2, 30), BlockHit("b1", "first", 0, 7, 3, 12)]
    body = {
        "topic": "t",
        "ranks": [
            {"1": [[0, 7, 0, 2]], "2": [[0, 7, 2, 2]]},  # rank 0: step 2 reads blocks 2 and 3
            {"1": [[0, 6, 0, 4]], "2": [[0, 7, 4, 2]], "3": [[0, 7, 3, 1]]},  # rank 1: step 3 reads block 3
        ],
    }
    found = exposures_in_steps(body, "lin", "s3://b/c/step-3/", "t", hits)
    assert [(e.step, e.rank, e.block, e.tokens) for e in found] == [(2, 0, 2, 30), (2, 0, 3, 12), (3, 1, 3, 12)]
    assert exposures_in_steps(body, "lin", "s3://b/c/step-3/", "other-topic", hits) == []
    assert first_exposures(found)["lin"].step == 2


def _clean(docs: list[Document], blocklist=None):
    pipeline = CleaningPipeline(CONFIG)
    return pipeline.finish(pipeline.start(docs, "b9"), None, blocklist)


def test_a_blocked_reupload_is_dropped_with_its_request_and_the_counts_add_up():
    index = MemoryDedupIndex(num_perm=CFG.num_buckets * CFG.hashes_per_bucket, num_bands=CFG.num_buckets)
    _commit(index, "b1", {"first": FIRST})
    prints = fingerprints([("text", TEXT)], CONFIG)
    blocklist = MemoryBlocklist(entries("req-1", prints, kept_copies(index, prints, CFG), CFG))
    docs = [Document(id=i, text=t, source=i) for i, t in (("a", TEXT), ("b", FIRST), ("c", SECOND), ("d", OTHER))]
    result = _clean(docs, blocklist)
    assert {d.id: d.reason for d in result.dropped} == {
        "a": "blocked:req-1",
        "b": "blocked:req-1",
        "c": "blocked:req-1",
    }
    assert [d.id for d in result.kept] == ["d"]
    assert result.counts == {"in": 4, "kept": 1, "dropped": 3, "quarantined": 0}
    assert result.dropped_by_reason() == {"takedown_blocklist:blocked": 3}
    fresh = [Document(id=i, text=t, source=i) for i, t in (("a", TEXT), ("d", OTHER))]
    assert [d.id for d in _clean(fresh).kept] == ["a", "d"]  # no blocklist: nothing blocked


def test_an_entry_blocks_exactly_or_by_a_near_signature_and_adding_again_adds_nothing():
    [p] = fingerprints([("text", TEXT)], CONFIG)
    blocklist = MemoryBlocklist()
    assert blocklist.add([BlockEntry("r", "text", p.exact, p.signature, p.bands)]) == 1
    assert blocklist.add([BlockEntry("r", "text", p.exact, p.signature, p.bands)]) == 0
    near, far = (fingerprints([("t", t)], CONFIG)[0] for t in (FIRST, OTHER))
    got = blocklist.match(
        np.array([p.exact, near.exact, far.exact], dtype=np.uint64),
        np.array([p.bands, near.bands, far.bands]),
        [p.signature, near.signature, far.signature],
        0.6,
    )
    assert got == ["r", "r", None]


def test_a_retune_keeps_a_blocked_document_dropped():
    """A retune walks the chains of the new config, which hold no blocklist step: a blocked document must not come
    back as kept."""
    from pipeline_project.cleaning.output.attributes import rows_of
    from pipeline_project.cleaning.retune.decide import Retuner

    [p] = fingerprints([("text", TEXT)], CONFIG)
    blocklist = MemoryBlocklist([BlockEntry("req-1", "text", p.exact, p.signature, p.bands)])
    result = _clean([Document(id="a", text=TEXT, source="a"), Document(id="d", text=OTHER, source="d")], blocklist)
    retuned = Retuner(CONFIG, CONFIG).run("b9", rows_of(result.kept, result.dropped, result.quarantined))
    assert [(o.decision, o.step, o.reason) for o in retuned.outcomes] == [
        ("kept", "", ""),
        ("dropped", "takedown_blocklist", "blocked:req-1"),
    ]
