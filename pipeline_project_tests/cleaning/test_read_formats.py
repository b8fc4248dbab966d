"""The formats corpora come in (issue 38): Parquet by row group, WARC / WET records, source files by extension,
and tar / zip archives of repositories member by member. Each test builds its files in tmp_path, reads them
through the readers (`read_object`, and `read_stream` in small blocks), and checks that every record is accounted
for (records in = kept + quarantined, each with its reason) and the metadata each document keeps."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from pipeline_project.cleaning import CleaningConfig, Document, Quarantined, read_object, read_stream
from pipeline_project.cleaning.chain.profiles import ProfileRouter
from pipeline_project.cleaning.config import ReaderConfig
from pipeline_project.cleaning.read.readers import REASONS, SUPPORTED_SUFFIXES, format_of, split_suffix
from pipeline_project_harness.format_samples import (
    SOURCES,
    fineweb_parquet,
    html_page,
    parquet_bytes,
    stack_parquet,
    warc_bytes,
)
from pipeline_project_tests.cleaning.conftest import prose

HTML = CleaningConfig(reader=ReaderConfig(extract_html=True))


def _read(path: Path, config: CleaningConfig, key: str | None = None) -> list[Document | Quarantined]:
    """The records of a file, read whole and streamed in 97-byte blocks: both must give the same."""
    key = key or f"raw/{path.name}"
    data = path.read_bytes()
    whole = list(read_object(key, data, config))
    streamed = list(read_stream(key, (data[i : i + 97] for i in range(0, len(data), 97)), config))
    assert [_sig(r) for r in whole] == [_sig(r) for r in streamed]
    for r in whole:
        assert r.source == key
        if isinstance(r, Quarantined):
            assert r.reason in REASONS, r
        else:
            json.dumps(r.meta, allow_nan=False)
    assert len({r.id for r in whole}) == len(whole), "every record has an id of its own"
    return whole


def _sig(r) -> tuple:
    return (r.id, r.text, json.dumps(r.meta, sort_keys=True)) if isinstance(r, Document) else (r.id, r.reason)


def _tally(records) -> tuple[list[Document], Counter]:
    docs = [r for r in records if isinstance(r, Document)]
    return docs, Counter(r.reason for r in records if isinstance(r, Quarantined))


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ---- suffixes ------------------------------------------------------------------------------------------


def test_the_one_suffix_list_names_the_new_formats():
    for suffix in (".parquet", ".warc", ".warc.gz", ".wet", ".warc.wet.gz", ".tar", ".tar.gz", ".tgz", ".zip"):
        assert suffix in SUPPORTED_SUFFIXES or split_suffix(f"x{suffix}") is not None, suffix
    for suffix in (".py", ".go", ".rs", ".js", ".ts", ".java", ".c", ".cpp", ".h", ".rb", ".py.gz"):
        assert split_suffix(f"repo/x{suffix}")[0] == "source", suffix
    for key in ("x.parquet.gz", "x.zip.zst", "x.md", "x.css", "x.tar.bz2"):
        assert split_suffix(key) is None, key
    assert format_of("a/b.warc.wet.gz") == ".wet.gz" and format_of("r.tgz") == ".tgz"


# ---- Parquet -------------------------------------------------------------------------------------------


def test_parquet_fineweb_rows_become_documents_with_their_columns_as_fields(tmp_path):
    texts = [prose(4, seed=i) for i in range(5)]
    texts[1] = texts[3] = None  # a null text: quarantined, never dropped silently
    path = _write(tmp_path, "fineweb.parquet", fineweb_parquet(texts, row_group_size=2))
    out = _read(path, CleaningConfig())
    docs, quarantined = _tally(out)
    assert len(out) == 5 == len(docs) + sum(quarantined.values())
    assert quarantined == {"text_not_string": 2}
    assert [d.id for d in docs] == ["raw/fineweb.parquet#1", "raw/fineweb.parquet#3", "raw/fineweb.parquet#5"]
    fields = docs[0].meta["fields"]
    assert fields["id"] == "<urn:uuid:00000000>" and fields["url"] == "https://example.org/page/0"
    assert fields["dump"] == "CC-MAIN-2024-10" and fields["language"] == "en" and fields["token_count"] == 100
    assert "text" not in fields and docs[0].text == texts[0]


def test_parquet_of_the_stack_reads_content_and_routes_to_code(tmp_path):
    path = _write(tmp_path, "the-stack.parquet", stack_parquet(SOURCES))
    docs, quarantined = _tally(_read(path, CleaningConfig()))
    assert len(docs) == len(SOURCES) and not quarantined
    router = ProfileRouter(CleaningConfig())
    for doc in docs:
        assert doc.text == SOURCES[doc.meta["fields"]["path"]] and len(doc.meta["fields"]["blob_id"]) == 40
        assert router.select(doc) == "code"
    assert {d.meta["lang"] for d in docs} == {"python", "go", "rust", "javascript", "ruby"}


def test_parquet_columns_are_mapped_by_the_reader_config_as_jsonl_fields_are(tmp_path):
    cfg = CleaningConfig(reader=ReaderConfig(text_field="body", meta_fields=("url",)))
    path = _write(tmp_path, "x.parquet", parquet_bytes({"body": ["one", "two"], "url": ["u1", "u2"], "n": [1, 2]}))
    docs, _ = _tally(_read(path, cfg))
    assert [(d.text, d.meta["fields"]) for d in docs] == [("one", {"url": "u1"}), ("two", {"url": "u2"})]
    [line] = read_object("x.jsonl", b'{"body": "three", "url": "u3", "n": 3}\n', cfg)
    assert (line.text, line.meta["fields"]) == ("three", {"url": "u3"})


def test_parquet_without_a_text_column_quarantines_every_row(tmp_path):
    path = _write(tmp_path, "x.parquet", parquet_bytes({"body": ["a", "b", "c"]}))
    docs, quarantined = _tally(_read(path, CleaningConfig()))
    assert not docs and quarantined == {"missing_text_field": 3}


def test_a_cut_or_corrupt_parquet_file_is_one_record_and_good_row_groups_are_kept(tmp_path):
    data = fineweb_parquet([prose(4, seed=i) for i in range(6)], row_group_size=2)
    cut = _write(tmp_path, "cut.parquet", data[: len(data) // 2])
    assert [(r.id, r.reason) for r in _read(cut, CleaningConfig())] == [("raw/cut.parquet", "corrupt_parquet")]
    # a row group past the decompression cap ends the file: the groups before are kept
    big = fineweb_parquet([prose(4, seed=1), prose(4, seed=2), "x" * 200_000], row_group_size=2)
    path = _write(tmp_path, "big.parquet", big)
    docs, quarantined = _tally(_read(path, CleaningConfig(reader=ReaderConfig(max_decompressed_bytes=100_000))))
    assert len(docs) == 2 and quarantined == {"decompressed_too_large": 1}


# ---- WARC and WET --------------------------------------------------------------------------------------


def test_wet_conversion_records_are_documents_with_their_record_id_and_uri(tmp_path):
    texts = [prose(4, seed=i) for i in range(3)]
    data = warc_bytes(
        [("conversion", f"https://e.org/{i}", t.encode(), "text/plain", None) for i, t in enumerate(texts)]
    )
    for name, body in (("crawl.warc.wet", data), ("crawl.warc.wet.gz", gzip.compress(data))):
        out = _read(_write(tmp_path, name, body), CleaningConfig())
        docs, quarantined = _tally(out)
        assert len(out) == 4 and quarantined == {"warc_non_document": 1}  # the warcinfo record
        assert [d.text for d in docs] == texts
        fields = docs[2].meta["fields"]
        assert fields["url"] == "https://e.org/2" and fields["warc_type"] == "conversion"
        assert fields["warc_record_id"].startswith("<urn:uuid:") and fields["warc_date"]


def test_warc_html_responses_go_through_the_extractor_and_other_records_are_accounted_for(tmp_path):
    page = html_page("Gardens", prose(6, seed=3))
    records = [
        ("request", "https://e.org/a", b"GET /a HTTP/1.1\r\nHost: e.org\r\n\r\n", "application/http", None),
        ("response", "https://e.org/a", page, "text/html; charset=utf-8", "200 OK"),
        ("metadata", "https://e.org/a", b"fetchTimeMs: 12\r\n", "application/warc-fields", None),
        ("response", "https://e.org/b", page, "text/html", "404 Not Found"),
        ("response", "https://e.org/c.png", b"\x89PNG\r\n\x1a\n" + bytes(100), "image/png", "200 OK"),
        ("response", "https://e.org/d.txt", prose(3, seed=4).encode(), "text/plain", "200 OK"),
    ]
    gz = warc_bytes(records, gzip=True)  # one gzip member per record, as Common Crawl writes them
    out = _read(_write(tmp_path, "crawl.warc.gz", gz), HTML)
    docs, quarantined = _tally(out)
    assert len(out) == 7 == len(docs) + sum(quarantined.values())
    assert quarantined == {"warc_non_document": 4, "warc_unsupported_payload": 1}
    html_doc, text_doc = docs
    assert html_doc.meta["extracted_from"] == "html" and "Contact us" not in html_doc.text
    assert html_doc.text.split("\n")[-1] in prose(6, seed=3)
    assert html_doc.meta["fields"]["url"] == "https://e.org/a" and html_doc.meta["fields"]["warc_type"] == "response"
    assert text_doc.text == prose(3, seed=4)
    off = _tally(_read(_write(tmp_path, "off.warc.gz", gz), CleaningConfig()))[1]
    assert off["html_extraction_disabled"] == 1 and sum(off.values()) == 6  # extraction off: the page is counted


def test_a_warc_record_cut_mid_body_is_quarantined_and_the_records_before_are_kept(tmp_path):
    texts = [prose(4, seed=i) for i in range(3)]
    data = warc_bytes(
        [("conversion", f"https://e.org/{i}", t.encode(), "text/plain", None) for i, t in enumerate(texts)]
    )
    out = _read(_write(tmp_path, "cut.wet", data[:-50]), CleaningConfig())
    assert [getattr(r, "reason", "doc") for r in out] == ["warc_non_document", "doc", "doc", "truncated_record"]
    assert out[-1].id == "raw/cut.wet#4"
    gz = gzip.compress(data)
    cut_gz = _read(_write(tmp_path, "cut.wet.gz", gz[:-50]), CleaningConfig())
    assert cut_gz[-1].reason == "truncated_archive" and sum(isinstance(r, Document) for r in cut_gz) == 2
    garbage = _read(_write(tmp_path, "junk.warc", b"this is not a warc file\r\n\r\n" * 20), CleaningConfig())
    assert [r.reason for r in garbage] == ["corrupt_warc"]


def test_a_warc_body_past_the_document_cap_is_quarantined(tmp_path):
    data = warc_bytes([("conversion", "https://e.org/big", b"word " * 50_000, "text/plain", None)])
    cfg = CleaningConfig(reader=ReaderConfig(max_document_bytes=10_000))
    _, quarantined = _tally(_read(_write(tmp_path, "big.wet", data), cfg))
    assert quarantined == {"warc_non_document": 1, "document_too_large": 1}


# ---- source files --------------------------------------------------------------------------------------


def test_source_files_by_extension_carry_path_and_language_and_route_to_code(tmp_path):
    repo = tmp_path / "repo"
    more = {"A.java": "class A { int x = 1; }\n", "m.ts": "export const x: number = 1;\n", "u.h": "int f(void);\n"}
    for rel, code in {**SOURCES, **more, "core/util.cpp": "int add(int a, int b) { return a + b; }\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(code)
    want = {"python", "go", "rust", "javascript", "ruby", "java", "typescript", "c", "c++"}
    router, langs = ProfileRouter(CleaningConfig()), set()
    for path in sorted(p for p in repo.rglob("*") if p.is_file()):
        key = "raw/code-dump/" + path.relative_to(repo).as_posix()
        [doc] = _read(path, CleaningConfig(), key)
        assert isinstance(doc, Document) and doc.meta["fields"]["path"] == key
        assert router.select(doc) == "code" and doc.meta["lang"] == doc.meta["fields"]["language"]
        langs.add(doc.meta["lang"])
    assert langs == want
    [gz] = read_object("raw/x/geometry.py.gz", gzip.compress(SOURCES["src/geometry.py"].encode()), CleaningConfig())
    assert gz.meta["fields"] == {"path": "raw/x/geometry.py", "language": "python"}


def test_a_binary_file_under_a_source_extension_is_quarantined(tmp_path):
    elf = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + bytes(range(256)) * 8
    noise = bytes((i * 151 + 7) % 254 + 1 for i in range(4000))  # control bytes, no NUL
    high = bytes(0x80 + (i * 37) % 0x80 for i in range(4000))  # no encoding fits
    cases = {"tool.c": (elf, "nul_bytes"), "blob.rs": (noise, "binary_content"), "x.go": (high, "undecodable")}
    for name, (data, reason) in cases.items():
        assert [(r.id, r.reason) for r in _read(_write(tmp_path, name, data), CleaningConfig())] == [
            (f"raw/{name}", reason)
        ]


# ---- archives of repositories --------------------------------------------------------------------------


def _members() -> dict[str, bytes]:
    return {
        **{f"demo/{p}": c.encode() for p, c in SOURCES.items()},
        "demo/README.md": b"# demo\n",  # no reader: unsupported_format
        "demo/assets/logo.png": b"\x89PNG\r\n\x1a\n" + bytes(64),  # no reader
        "demo/data/notes.jsonl": b'{"text": "first note"}\n{"text": 5}\n',  # one kept, one text_not_string
        "demo/bin/tool.py": b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"compiled code " * 20,  # nul_bytes
        "demo/vendor/old.tar.gz": gzip.compress(b"x"),  # nested_archive
    }


def _tar(members: dict[str, bytes], mode: str = "w:gz", link: bool = True) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tar:
        dirs = sorted({m.rsplit("/", 1)[0] for m in members})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("demo/src/alias.py")
            info.type, info.linkname = tarfile.SYMTYPE, "geometry.py"
            tar.addfile(info)
    return out.getvalue()


_WANT = {"unsupported_format": 2, "text_not_string": 1, "nul_bytes": 1, "nested_archive": 1}


@pytest.mark.parametrize("name", ["repo.tar.gz", "repo.tgz", "repo.tar"])
def test_a_tar_of_a_repository_is_read_member_by_member(tmp_path, name):
    data = _tar(_members(), "w" if name.endswith(".tar") else "w:gz")
    out = _read(_write(tmp_path, name, data), CleaningConfig())
    docs, quarantined = _tally(out)
    # every file member is accounted for: 5 sources + 1 note kept; 7 quarantined with reasons (links too)
    assert len(docs) == len(SOURCES) + 1 and quarantined == {**_WANT, "not_a_regular_file": 1}
    code = {d.meta["fields"]["path"]: d for d in docs if "path" in d.meta.get("fields", {})}
    assert set(code) == {f"demo/{p}" for p in SOURCES}
    router = ProfileRouter(CleaningConfig())
    for path, doc in code.items():
        assert doc.id == f"raw/{name}!{path}" and doc.source == f"raw/{name}" and router.select(doc) == "code"
    assert {r.id for r in out if getattr(r, "reason", "") == "nul_bytes"} == {f"raw/{name}!demo/bin/tool.py"}


def test_a_cut_tar_keeps_the_members_before_and_a_tar_bomb_is_capped(tmp_path):
    members = {f"demo/m{i}.py": f"value_{i} = {i}\nprint(value_{i})\n".encode() * 40 for i in range(6)}
    plain = _tar(members, "w", link=False)
    for cut in (len(plain) // 2, 512 * 5 + 100):
        out = _read(_write(tmp_path, "cut.tar", plain[:cut]), CleaningConfig())
        assert out[-1].id == "raw/cut.tar" and out[-1].reason == "truncated_archive"
        assert 0 < sum(isinstance(r, Document) for r in out) < 6
    gz = _tar(members, "w:gz", link=False)
    out = _read(_write(tmp_path, "cut.tar.gz", gz[: len(gz) - 20]), CleaningConfig())
    assert out[-1].reason == "truncated_archive"
    bomb = _tar({"demo/zeros.txt": b"\x00" * (4 << 20)}, "w:gz", link=False)
    cfg = CleaningConfig(reader=ReaderConfig(max_decompressed_bytes=1 << 20))
    assert [r.reason for r in _read(_write(tmp_path, "bomb.tar.gz", bomb), cfg)] == ["decompressed_too_large"]
    assert [r.reason for r in _read(_write(tmp_path, "junk.tar", b"\x01" * 2048), CleaningConfig())] == [
        "corrupt_archive"
    ]


def test_a_zip_of_a_repository_is_read_member_by_member_within_its_limits(tmp_path):
    out_zip = io.BytesIO()
    with zipfile.ZipFile(out_zip, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("demo/", "")
        for name, data in _members().items():
            z.writestr(name, data)
    data = out_zip.getvalue()
    out = _read(_write(tmp_path, "repo.zip", data), CleaningConfig())
    docs, quarantined = _tally(out)
    assert len(docs) == len(SOURCES) + 1 and quarantined == _WANT
    # a member whose bytes are corrupt is quarantined; the members after it are still read
    broken = bytearray(data)
    at = broken.find(b"demo/src/geometry.py") + len("demo/src/geometry.py")
    broken[at + 20] ^= 0xFF
    docs2, quarantined2 = _tally(_read(_write(tmp_path, "broken.zip", bytes(broken)), CleaningConfig()))
    assert len(docs2) == len(docs) - 1 and quarantined2 == {**_WANT, "corrupt_archive": 1}
    # declared sizes past the decompression cap: the members past it are refused, never inflated
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.py", SOURCES["src/geometry.py"])
        z.writestr("zeros.py", b"x = 0\n" * 100_000)
    cfg = CleaningConfig(reader=ReaderConfig(max_decompressed_bytes=100_000))
    capped = _read(_write(tmp_path, "bomb.zip", bomb.getvalue()), cfg)
    assert [getattr(r, "reason", "doc") for r in capped] == ["doc", "decompressed_too_large"]
    assert [r.reason for r in _read(_write(tmp_path, "cut.zip", data[: len(data) // 2]), CleaningConfig())] == [
        "corrupt_archive"
    ]
