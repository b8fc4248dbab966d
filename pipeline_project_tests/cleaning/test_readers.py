import gzip
import json

import zstandard

from pipeline_project.cleaning import CleaningConfig, Document, Quarantined, read_object
from pipeline_project.cleaning.config import ReaderConfig


def _jsonl(*texts: str) -> bytes:
    return b"".join(json.dumps({"text": t, "url": "u"}).encode() + b"\n" for t in texts)


def test_txt_is_one_document_keyed_by_source(config):
    [doc] = read_object("raw/a.txt", "héllo world\n".encode(), config)
    assert isinstance(doc, Document) and doc.id == "raw/a.txt" and doc.text == "héllo world\n"


def test_jsonl_one_document_per_line_with_line_numbers(config):
    docs = list(read_object("raw/a.jsonl", _jsonl("one", "two") + b"\n" + _jsonl("three"), config))
    assert [d.id for d in docs] == ["raw/a.jsonl#1", "raw/a.jsonl#2", "raw/a.jsonl#4"]
    assert [d.text for d in docs] == ["one", "two", "three"] and docs[0].meta["fields"] == {"url": "u"}


def test_configurable_text_field():
    cfg = CleaningConfig(reader=ReaderConfig(text_field="content"))
    [doc] = read_object("a.jsonl", b'{"content": "body"}\n', cfg)
    assert doc.text == "body"


def test_compressed_formats(config):
    payload = _jsonl("alpha", "beta")
    for key, data in [
        ("a.jsonl.gz", gzip.compress(payload)),
        ("a.json.gz", gzip.compress(payload)),
        ("a.jsonl.zst", zstandard.ZstdCompressor().compress(payload)),
    ]:
        assert [d.text for d in read_object(key, data, config)] == ["alpha", "beta"], key
    [doc] = read_object("b.txt.gz", gzip.compress(b"plain"), config)
    assert doc.text == "plain"


def test_truncated_gzip_keeps_complete_lines_and_quarantines_the_object(config):
    payload = _jsonl(*[f"line number {i} " * 20 for i in range(200)])
    data = gzip.compress(payload)
    out = list(read_object("t.jsonl.gz", data[: len(data) // 2], config))
    assert isinstance(out[-1], Quarantined) and out[-1].reason == "truncated_archive"
    docs = [o for o in out if isinstance(o, Document)]
    assert 0 < len(docs) < 200 and docs[0].text.startswith("line number 0")


def test_truncated_zstd_is_quarantined(config):
    data = zstandard.ZstdCompressor().compress(_jsonl(*["x" * 1000] * 500))
    out = list(read_object("t.jsonl.zst", data[:-10], config))
    assert [o.reason for o in out if isinstance(o, Quarantined)] == ["truncated_archive"]


def test_nul_bytes_quarantined(config):
    [q] = read_object("n.txt", b"abc\x00def", config)
    assert isinstance(q, Quarantined) and q.reason == "nul_bytes"
    out = list(read_object("n.jsonl", _jsonl("ok") + b'{"text": "a\x00b"}\n', config))
    assert [type(o).__name__ for o in out] == ["Document", "Quarantined"] and out[1].reason == "nul_bytes"


def test_line_too_long_quarantined_with_small_cap():
    cfg = CleaningConfig(reader=ReaderConfig(max_line_bytes=1000))
    out = list(read_object("l.jsonl", _jsonl("short", "y" * 2000), cfg))
    assert out[0].text == "short" and out[1].reason == "line_too_long" and out[1].id == "l.jsonl#2"
    [q] = read_object("l.txt", b"z" * 5000, cfg)
    assert q.reason == "line_too_long"
    # many short lines adding up past the cap are fine
    [doc] = read_object("ok.txt", b"word\n" * 1000, cfg)
    assert isinstance(doc, Document)


def test_bad_json_lines_quarantined_and_batch_continues(config):
    out = list(read_object("b.jsonl", b'{"text": "a"}\n{not json\n[1, 2]\n{"text": "b"}\n', config))
    assert [getattr(o, "reason", o.text if isinstance(o, Document) else None) for o in out] == [
        "a",
        "bad_json_line",
        "missing_text_field",
        "b",
    ]


def test_undecodable_bytes_quarantined(config):
    import random

    rng = random.Random(0)
    data = bytes(rng.randrange(1, 256) for _ in range(3000))
    [q] = read_object("u.txt", data, config)
    assert isinstance(q, Quarantined) and q.reason == "undecodable"
    out = list(read_object("u.jsonl", _jsonl("fine") + data.replace(b"\n", b" ") + b"\n", config))
    assert out[0].text == "fine" and out[1].reason == "undecodable"


def test_few_invalid_utf8_bytes_are_replaced_not_guessed(config):
    [doc] = read_object("f.txt", "naïve café ".encode() * 500 + b"\xff", config)
    assert doc.meta["encoding"] == "utf-8-lossy" and doc.text.endswith("\ufffd")


def test_latin1_corpus_file_is_detected_and_converted(corpus, config):
    path = next((corpus / "en_gutenberg_latin1").glob("*.txt"))
    raw = path.read_bytes()
    [doc] = read_object(path.name, raw, config)
    assert doc.meta["encoding"] not in ("utf-8", "utf-8-sig")
    assert "\ufffd" not in doc.text
    assert doc.text == raw.decode("latin-1") or doc.text == raw.decode("cp1252")


def test_unsupported_and_html_without_extraction(config):
    [q] = read_object("x.bin", b"data", config)
    assert q.reason == "unsupported_format"
    [q] = read_object("page.html", b"<html></html>", config)
    assert q.reason == "unsupported_format"


def test_html_extraction_when_configured():
    cfg = CleaningConfig(reader=ReaderConfig(extract_html=True))
    html = (
        "<html><body><nav>Home | About</nav><article><p>" + "The committee published a long report about "
        "the harbor and its history. " * 10 + "</p></article></body></html>"
    ).encode()
    [doc] = read_object("p.html", html, cfg)
    assert "committee published" in doc.text and "<p>" not in doc.text
