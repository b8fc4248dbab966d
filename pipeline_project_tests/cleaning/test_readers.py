import codecs
import gzip
import json

import zstandard

from pipeline_project.cleaning import CleaningConfig, Document, Quarantined, read_object, read_shard, write_shards
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
        "not_an_object",
        "b",
    ]


def test_binary_and_undecodable_bytes_quarantined(config):
    import random

    rng = random.Random(0)
    binary = bytes(rng.randrange(1, 256) for _ in range(3000))  # ~11 % control bytes: not text
    [q] = read_object("u.txt", binary, config)
    assert isinstance(q, Quarantined) and q.reason == "binary_content"
    high = bytes(rng.randrange(128, 256) for _ in range(3000))  # no encoding fits
    [q] = read_object("u.txt", high, config)
    assert q.reason == "undecodable"
    out = list(read_object("u.jsonl", _jsonl("fine") + high.replace(b"\n", b" ") + b"\n", config))
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
    for key in ("page.html", "page.HTM", "page.html.gz"):
        [q] = read_object(key, b"<html></html>", config)
        assert q.reason == "html_extraction_disabled", key


def test_html_extraction_when_configured():
    cfg = CleaningConfig(reader=ReaderConfig(extract_html=True))
    html = (
        "<html><body><nav>Home | About</nav><article><p>" + "The committee published a long report about "
        "the harbor and its history. " * 10 + "</p></article></body></html>"
    ).encode()
    [doc] = read_object("p.html", html, cfg)
    assert "committee published" in doc.text and "<p>" not in doc.text


# ---- one bad record never fails a batch (issue: bad input) ---------------------------------------------


def _reasons(out) -> list[str]:
    return [o.reason if isinstance(o, Quarantined) else "doc" for o in out]


def test_deeply_nested_json_line_is_quarantined_and_the_rest_is_read(config):
    deep = b'{"text": "x", "nested": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    out = list(read_object("deep.jsonl", _jsonl("before") + deep + b"[" * 50_000 + b"\n" + _jsonl("after"), config))
    assert _reasons(out) == ["doc", "json_too_deep", "json_too_deep", "doc"]
    assert [o.id for o in out] == [f"deep.jsonl#{i}" for i in (1, 2, 3, 4)]


def test_lone_surrogates_are_replaced_so_every_later_step_can_encode_the_document(config):
    line = b'{"text": "half an emoji \\ud83d here", "title": "t\\udc00", "\\ud800key": "v"}\n'
    [doc] = read_object("s.jsonl", line, config)
    assert doc.text == "half an emoji \ufffd here" and doc.meta["repaired"] == {"lone_surrogates": 1}
    assert doc.meta["fields"] == {"title": "t\ufffd", "\ufffdkey": "v"}
    [shard] = write_shards([doc])  # the shard writer encodes UTF-8 strictly
    assert [r["text"] for r in read_shard(shard.data)] == [doc.text]
    # a surrogate pair is a real character and is kept as one
    [doc] = read_object("s.jsonl", b'{"text": "\\ud83d\\ude00"}\n', config)
    assert doc.text == "\U0001f600" and "repaired" not in doc.meta


def test_json_shape_problems_each_have_a_reason(config):
    lines = b'"a string"\n7\nnull\n[{"text": "x"}]\n{"body": "x"}\n{"text": 5}\n{"text": null}\n{"text": ["x"]}\n'
    assert _reasons(read_object("j.jsonl", lines, config)) == [
        "not_an_object",
        "not_an_object",
        "not_an_object",
        "not_an_object",
        "missing_text_field",
        "text_not_string",
        "text_not_string",
        "text_not_string",
    ]


def test_nan_and_nested_values_stay_out_of_meta_fields(config):
    [doc] = read_object(
        "n.jsonl", b'{"text": "t", "a": NaN, "b": Infinity, "c": [1], "d": {"e": 1}, "f": 2.5}\n', config
    )
    assert doc.meta["fields"] == {"f": 2.5}
    json.dumps(doc.meta, allow_nan=False)


def test_empty_and_whitespace_objects_are_records_too(config):
    for key, data in [
        ("e.txt", b""),
        ("e.jsonl", b""),
        ("w.txt", b" \n\t\r\n"),
        ("w.jsonl", b"\n\n  \n"),
        ("e.txt.gz", gzip.compress(b"")),
        ("e.jsonl.zst", zstandard.ZstdCompressor().compress(b"\n")),
        ("bom.txt", b"\xef\xbb\xbf"),
        ("w16.txt", " \n ".encode("utf-16")),
        ("ideographic.txt", "\u3000\u3000".encode()),
    ]:
        [q] = read_object(key, data, config)
        assert isinstance(q, Quarantined) and q.reason == "empty_object" and q.id == key, key


def test_utf16_and_utf32_with_and_without_a_bom(config):
    text = "The harbour master had seen many ships come in under strange flags.\n"
    for codec in ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"):
        [doc] = read_object("w.txt", text.encode(codec), config)
        assert doc.text == text, codec
    [doc] = read_object("w.txt", codecs.BOM_UTF32_BE + text.encode("utf-32-be"), config)
    assert doc.text == text and doc.meta["encoding"] == "utf-32"
    lines = _jsonl("one", "two", "three").decode()
    for codec in ("utf-16", "utf-16-le", "utf-32"):
        docs = list(read_object("w.jsonl", lines.encode(codec), config))
        assert [d.text for d in docs] == ["one", "two", "three"] and docs[0].meta["encoding"] == codec, codec
    # a BOM that lies: an unpaired surrogate after a UTF-16 BOM
    [q] = read_object("w.txt", codecs.BOM_UTF16_LE + "ab".encode("utf-16-le") + b"\x00\xd8", config)
    assert q.reason == "undecodable"


def test_gzip_or_zstd_content_under_a_plain_name_is_read(config):
    payload = _jsonl("alpha", "beta")
    for key, data in [
        ("g.jsonl", gzip.compress(payload)),
        ("z.jsonl", zstandard.ZstdCompressor().compress(payload)),
        ("z.jsonl.gz", zstandard.ZstdCompressor().compress(payload)),
        ("two-members.jsonl.gz", gzip.compress(_jsonl("alpha")) + gzip.compress(_jsonl("beta"))),
    ]:
        assert [d.text for d in read_object(key, data, config)] == ["alpha", "beta"], key
    [q] = read_object("p.txt.gz", b"plain text, not gzip", config)
    assert q.reason == "corrupt_archive"


def test_gzip_without_its_trailer_keeps_every_line(config):
    data = gzip.compress(_jsonl("one", "two"))[:-8]
    assert _reasons(read_object("t.jsonl.gz", data, config)) == ["doc", "doc", "truncated_archive"]


def test_decompression_bombs_are_capped_while_inflating():
    import tracemalloc
    import zlib

    cfg = CleaningConfig(reader=ReaderConfig(max_decompressed_bytes=4 << 20))
    zeros = b"\0" * (256 << 20)
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    bombs = {"b.jsonl.gz": gz.compress(zeros) + gz.flush(), "b.jsonl.zst": zstandard.ZstdCompressor().compress(zeros)}
    del zeros
    for key, bomb in bombs.items():
        tracemalloc.start()
        try:
            [q] = read_object(key, bomb, cfg)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert q.reason == "decompressed_too_large", key
        assert peak < 40 << 20, f"{key}: {peak >> 20} MiB allocated for a 4 MiB cap"


def test_size_caps():
    cfg = CleaningConfig(reader=ReaderConfig(max_document_bytes=1000, max_decompressed_bytes=10_000))
    [q] = read_object("big.txt", b"word " * 300, cfg)
    assert q.reason == "document_too_large"
    [q] = read_object("big.jsonl", _jsonl("x" * 20_000), cfg)
    assert q.reason == "object_too_large"
    [q] = read_object("big.jsonl.gz", gzip.compress(_jsonl("x" * 20_000)), cfg)
    assert q.reason == "decompressed_too_large"
    assert [d.text for d in read_object("ok.jsonl", _jsonl("x" * 900, "y" * 900), cfg)] == ["x" * 900, "y" * 900]


def test_html_extraction_failure_is_quarantined_without_echoing_the_page(monkeypatch):
    import trafilatura

    def boom(html, **_):
        raise ValueError("cannot parse " + html)

    monkeypatch.setattr(trafilatura, "extract", boom)
    cfg = CleaningConfig(reader=ReaderConfig(extract_html=True))
    page = "<html><body>write to jane.doe@example.com " + "secret words " * 100 + "</body></html>"
    [q] = read_object("p.html", page.encode(), cfg)
    assert q.reason == "html_extraction_failed" and q.detail.startswith("ValueError")
    assert "jane.doe" not in q.detail and len(q.detail) <= 120


def test_json_error_details_are_short_and_masked(config):
    line = b'{"text": "mail jane.doe@example.com", ' + b'"x": 1' * 200 + b"\n"
    [q] = read_object("e.jsonl", line, config)
    assert q.reason == "bad_json_line" and "jane.doe" not in q.detail and len(q.detail) <= 120


def test_string_meta_fields_are_pii_masked_like_the_text(config):
    line = b'{"text": "t", "author": "jane.doe@example.com", "host": "8.8.8.8", "tel": "+1 (415) 555-0132", "n": 1}\n'
    [doc] = read_object("p.jsonl", line, config)
    assert doc.meta["fields"] == {
        "author": config.pii.email_mask,
        "host": config.pii.ip_mask,
        "tel": config.pii.phone_mask,
        "n": 1,
    }
    off = CleaningConfig(pii=config.pii.model_copy(update={"enabled": False}))
    [doc] = read_object("p.jsonl", line, off)
    assert doc.meta["fields"]["author"] == "jane.doe@example.com"


def test_one_list_of_suffixes_is_accepted_by_ingest_and_the_readers(config, repo_root):
    import re

    from pipeline_project.cleaning.read.readers import SUPPORTED_SUFFIXES, is_supported, split_suffix
    from pipeline_project.defs.assets.raw import raw_text

    assert {".txt", ".txt.gz", ".txt.zst", ".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz"} <= set(
        SUPPORTED_SUFFIXES
    )
    assert {".json.zst", ".html", ".htm", ".html.gz"} <= set(SUPPORTED_SUFFIXES)
    listed = set(SUPPORTED_SUFFIXES)
    for doc in (repo_root / "README.md", repo_root / "pipeline_project" / "cleaning" / "README.md"):
        listed |= set(re.findall(r"(?<![\w/])\.(?:txt|jsonl?|html?)(?:\.(?:gz|zst|zstd))?\b", doc.read_text()))
    listed |= set(re.findall(r"\.(?:txt|jsonl?|html?)(?:\.(?:gz|zst))?\b", raw_text.descriptions_by_key[raw_text.key]))
    for suffix in sorted(listed):
        key = f"raw/x/Name With Space{suffix.upper() if 'htm' in suffix else suffix}"
        assert is_supported(key) and split_suffix(key) is not None, suffix
        reasons = {getattr(o, "reason", None) for o in read_object(key, b"hello", config)}
        assert "unsupported_format" not in reasons, suffix
    for key in ("a.bin", "a.gz", "a.txt.bz2", "a.tar.bz2", "a.parquet.gz", "a.pdf"):
        assert not is_supported(key)
        assert [o.reason for o in read_object(key, b"x", config)] == ["unsupported_format"]
