"""The classes of malformed input and how each file of a class is built (see `bad_input` for the contract)."""

from __future__ import annotations

import codecs
import gzip
import json

import zstandard

from pipeline_project.demo.bad_input.files import (
    EXPECTED_NAME,
    KEPT,
    SCALES,
    BadClass,
    BadFile,
    Scale,
    big_txt,
    good_lines,
    gzip_bomb,
    long_line,
    one,
    parquet_file,
    prose,
    tiny_docs,
    wet_file,
    with_good,
    zstd_bomb,
)

__all__ = ["CLASSES", "EXPECTED_NAME", "KEPT", "SCALES", "BadClass", "BadFile", "Scale"]

# ---- the classes ---------------------------------------------------------------------------------------


CLASSES: list[BadClass] = []


def _bad_class(name: str, outcome: str, description: str):
    """Register the decorated generator `make(rng, scale) -> [BadFile]` as a class, in file order."""

    def register(make):
        CLASSES.append(BadClass(name, outcome, description, make))
        return make

    return register


# -- encodings
@_bad_class("utf8_few_invalid_bytes", KEPT, "UTF-8 prose with one invalid byte in thousands: decoded with U+FFFD")
def _(rng, s):
    text = prose(rng).encode()
    return one("encodings/few_invalid_bytes.txt", text[:200] + b"\xff" + text[200:], KEPT)


@_bad_class(
    "invalid_utf8_no_encoding_fits", "undecodable", "bytes 0x80-0xFF at random: invalid UTF-8, no encoding fits"
)
def _(rng, s):
    return one("encodings/high_bytes.txt", bytes(rng.randrange(0x80, 0x100) for _ in range(4000)), "undecodable")


@_bad_class("legacy_latin1", KEPT, "French prose in Latin-1: detected and converted")
def _(rng, s):
    return one("encodings/latin1.txt", prose(rng, "fr").encode("latin-1", "replace"), KEPT)


@_bad_class("utf16_with_bom", KEPT, "UTF-16 LE and BE with a BOM, as .txt")
def _(rng, s):
    return [
        *one("encodings/utf16le_bom.txt", prose(rng, "de").encode("utf-16"), KEPT),
        *one("encodings/utf16be_bom.txt", codecs.BOM_UTF16_BE + prose(rng).encode("utf-16-be"), KEPT),
    ]


@_bad_class("utf16_without_bom", KEPT, "UTF-16 LE and BE without a BOM, recognised by where the NUL bytes fall")
def _(rng, s):
    return [
        *one("encodings/utf16le_nobom.txt", prose(rng, "fr").encode("utf-16-le"), KEPT),
        *one("encodings/utf16be_nobom.txt", prose(rng).encode("utf-16-be"), KEPT),
    ]


@_bad_class("utf16_jsonl", KEPT, "JSON Lines in UTF-16, with a BOM (LE) and without one (BE)")
def _(rng, s):
    return [
        BadFile("encodings/utf16_bom.jsonl", [good_lines(rng, 3).decode().encode("utf-16")], kept=3),
        BadFile("encodings/utf16be_nobom.jsonl", [good_lines(rng, 3).decode().encode("utf-16-be")], kept=3),
    ]


@_bad_class("utf32", KEPT, "UTF-32 with a BOM (LE and BE) and without one (LE)")
def _(rng, s):
    return [
        *one("encodings/utf32le_bom.txt", prose(rng).encode("utf-32"), KEPT),
        *one("encodings/utf32be_bom.txt", codecs.BOM_UTF32_BE + prose(rng).encode("utf-32-be"), KEPT),
        *one("encodings/utf32le_nobom.txt", prose(rng).encode("utf-32-le"), KEPT),
    ]


@_bad_class("utf8_bom_jsonl", KEPT, "JSON Lines starting with a UTF-8 BOM")
def _(rng, s):
    return [BadFile("encodings/utf8_bom.jsonl", [codecs.BOM_UTF8 + good_lines(rng, 2)], kept=2)]


@_bad_class("bom_that_lies", "undecodable", "a UTF-16 BOM followed by an unpaired surrogate, or an odd byte count")
def _(rng, s):
    data = codecs.BOM_UTF16_LE + prose(rng).encode("utf-16-le") + b"\x00\xd8" + "end".encode("utf-16-le")
    return [
        *one("encodings/utf16_unpaired_surrogate.txt", data, "undecodable"),
        *one("encodings/utf16_odd_length.jsonl", good_lines(rng, 1).decode().encode("utf-16") + b"!", "undecodable"),
    ]


@_bad_class("crlf_line_endings", KEPT, "JSON Lines with Windows line endings")
def _(rng, s):
    return [BadFile("encodings/crlf.jsonl", [good_lines(rng, 3).replace(b"\n", b"\r\n")], kept=3)]


# -- bytes that are not text
@_bad_class("nul_bytes", "nul_bytes", "NUL bytes in a UTF-8 .txt, and in one JSON line")
def _(rng, s):
    return [
        *one("bytes/nul.txt", prose(rng).encode().replace(b" ", b"\x00", 3), "nul_bytes"),
        with_good(rng, "bytes/nul_line.jsonl", [b'{"text": "a\x00b"}'], "nul_bytes"),
    ]


@_bad_class("binary_without_nul", "binary_content", "random bytes 0x01-0xFF (no NUL) renamed .txt")
def _(rng, s):
    return one("bytes/binary.txt", bytes(rng.randrange(1, 256) for _ in range(8000)), "binary_content")


@_bad_class("empty_objects", "empty_object", "zero-byte objects: .txt, .jsonl, and a gzip of nothing")
def _(rng, s):
    return [
        *one("bytes/empty.txt", b"", "empty_object"),
        *one("bytes/empty.jsonl", b"", "empty_object"),
        *one("bytes/empty.txt.gz", gzip.compress(b"", mtime=0), "empty_object"),
    ]


@_bad_class("whitespace_only", "empty_object", "objects of spaces, tabs and newlines (ASCII, and U+3000 in UTF-8)")
def _(rng, s):
    return [
        *one("bytes/whitespace.txt", b" \t\r\n \n", "empty_object"),
        *one("bytes/blank_lines.jsonl", b"\n\n   \n\t\n", "empty_object"),
        *one("bytes/ideographic_space.txt", "\u3000\u3000\n".encode(), "empty_object"),
    ]


@_bad_class("control_characters", KEPT, "prose with a few BEL / ESC / backspace characters (ftfy removes them later)")
def _(rng, s):
    text = prose(rng)
    return one("bytes/control_chars.txt", ("\x07" + text[:100] + "\x1b[1m\b" + text[100:]).encode(), KEPT)


@_bad_class("lone_surrogates", KEPT, 'JSON "\\ud800"-style escapes: repaired to U+FFFD at read time')
def _(rng, s):
    lines = [
        b'{"text": "half an emoji \\ud83d and the rest", "title": "t\\udc00"}\n',
        b'{"text": "\\udfff\\ud800 backwards pair"}\n',
    ]
    return [BadFile("bytes/lone_surrogates.jsonl", [b"".join(lines)], kept=2)]


# -- JSON problems
@_bad_class("json_not_an_object", "not_an_object", "valid JSON lines that are arrays, strings, numbers, null")
def _(rng, s):
    return [with_good(rng, "json/not_object.jsonl", [b"[1, 2]", b'"a string"', b"42", b"null"], "not_an_object")]


@_bad_class("json_missing_text", "missing_text_field", "JSON objects without a text field")
def _(rng, s):
    return [with_good(rng, "json/missing_text.jsonl", [b'{"body": "x"}', b"{}"], "missing_text_field")]


@_bad_class("json_text_not_string", "text_not_string", "a text field that is a number, null, a list or an object")
def _(rng, s):
    bad = [b'{"text": 5}', b'{"text": null}', b'{"text": ["a"]}', b'{"text": {"a": 1}}']
    return [with_good(rng, "json/text_not_string.jsonl", bad, "text_not_string")]


@_bad_class("json_deep_nesting", "json_too_deep", "lines nested 20,000 levels deep (RecursionError in json.loads)")
def _(rng, s):
    bad = [b"[" * 20_000 + b"]" * 20_000, b'{"text": "x", "a": ' + b"[" * 20_000]
    return [with_good(rng, "json/deep.jsonl", bad, "json_too_deep")]


@_bad_class(
    "json_syntax_errors", "bad_json_line", "unterminated strings, trailing commas, raw control bytes in strings"
)
def _(rng, s):
    bad = [b'{"text": "unterminated', b'{"text": "a",}', b"not json at all", b'{"text": "tab\x01here"}']
    return [with_good(rng, "json/syntax.jsonl", bad, "bad_json_line")]


@_bad_class("json_pretty_printed", "bad_json_line", ".json is JSON Lines: a pretty-printed file is bad line by line")
def _(rng, s):
    body = json.dumps({"text": prose(rng), "id": 1}, indent=2).encode() + b"\n"
    return [BadFile("json/pretty.json", [body], quarantined={"bad_json_line": body.count(b"\n")})]


# -- archives
@_bad_class("truncated_archives", "truncated_archive", "a .txt.gz and a .txt.zst cut in half")
def _(rng, s):
    gz = gzip.compress(prose(rng).encode(), mtime=0)
    zst = zstandard.ZstdCompressor(write_checksum=True).compress(prose(rng).encode())
    return [
        *one("archives/truncated.txt.gz", gz[: len(gz) // 2], "truncated_archive"),
        *one("archives/truncated.txt.zst", zst[: len(zst) // 2], "truncated_archive"),
    ]


@_bad_class("gzip_without_trailer", "truncated_archive", "a .jsonl.gz without its 8-byte trailer: all lines kept")
def _(rng, s):
    data = gzip.compress(good_lines(rng, 3), mtime=0)[:-8]
    return [BadFile("archives/no_trailer.jsonl.gz", [data], kept=3, quarantined={"truncated_archive": 1})]


@_bad_class("corrupt_archives", "corrupt_archive", "gzip and zstd whose checksum does not match; zstd magic + garbage")
def _(rng, s):
    gz = bytearray(gzip.compress(good_lines(rng, 2), mtime=0))
    gz[-5] ^= 0xFF  # the CRC-32 in the trailer
    zst = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(good_lines(rng, 2)))
    zst[-1] ^= 0xFF  # the content checksum
    garbage = b"\x28\xb5\x2f\xfd" + bytes(rng.randrange(256) for _ in range(2000))
    return [
        *one("archives/bad_crc.jsonl.gz", bytes(gz), "corrupt_archive"),
        *one("archives/bad_checksum.jsonl.zst", bytes(zst), "corrupt_archive"),
        *one("archives/garbage.txt.zst", garbage, "corrupt_archive"),
    ]


@_bad_class("double_compressed", "binary_content", "a gzip inside a gzip: once inflated, it is still not text")
def _(rng, s):
    inner = gzip.compress(good_lines(rng, 20), mtime=0)
    return one("archives/double.jsonl.gz", gzip.compress(inner, mtime=0), "binary_content")


@_bad_class("plain_text_named_gz", "corrupt_archive", "plain text under a .txt.gz name")
def _(rng, s):
    return one("archives/not_gzip.txt.gz", prose(rng).encode(), "corrupt_archive")


@_bad_class(
    "compressed_under_plain_name", KEPT, "gzip content named .jsonl, zstd content named .txt: magic bytes decide"
)
def _(rng, s):
    return [
        BadFile("archives/gzip_inside.jsonl", [gzip.compress(good_lines(rng, 2), mtime=0)], kept=2),
        *one("archives/zstd_inside.txt", zstandard.ZstdCompressor().compress(prose(rng).encode()), KEPT),
    ]


@_bad_class("gzip_multi_member", KEPT, "three gzip members concatenated (as `cat a.gz b.gz c.gz` makes)")
def _(rng, s):
    data = b"".join(gzip.compress(good_lines(rng, 1), mtime=0) for _ in range(3))
    return [BadFile("archives/multi_member.jsonl.gz", [data], kept=3)]


@_bad_class("decompression_bombs", "decompressed_too_large", "gzip and zstd of zeros inflating far past the cap")
def _(rng, s):
    return [
        *one("archives/bomb.jsonl.gz", gzip_bomb(s.bomb_bytes), "decompressed_too_large"),
        *one("archives/bomb.txt.zst", zstd_bomb(s.bomb_bytes), "decompressed_too_large"),
    ]


# -- size
@_bad_class("line_too_long", "line_too_long", "one JSONL line of 200 MB (full scale) between two good lines")
def _(rng, s):
    return [BadFile("size/long_line.jsonl", long_line(rng, s.long_line_bytes), 2, {"line_too_long": 1})]


@_bad_class("txt_over_document_cap", "document_too_large", "a .txt larger than reader.max_document_bytes")
def _(rng, s):
    return [BadFile("size/huge.txt", big_txt(rng, s.big_txt_bytes), quarantined={"document_too_large": 1})]


@_bad_class("many_tiny_documents", KEPT, "a million one-line documents in one .jsonl (full scale)")
def _(rng, s):
    return [BadFile("size/tiny_docs.jsonl", tiny_docs(s.tiny_docs), kept=s.tiny_docs)]


# -- keys and formats
@_bad_class("unusual_keys", KEPT, "keys with spaces, NFC and NFD accents, CJK, emoji, and an upper-case suffix")
def _(rng, s):
    names = [
        "with space/a file name.txt",
        "naïve café.txt",
        "nai\u0308ve decomposed.txt",
        "文件夹/文档.txt",
        "emoji 🎉 party.txt",
        "SHOUTING.TXT",
        "mixed.JsonL",
    ]
    out = []
    for name in names:
        data = good_lines(rng, 1) if name.lower().endswith(".jsonl") else prose(rng).encode()
        out += one(f"keys/{name}", data, KEPT)
    return out


@_bad_class("html_without_extraction", "html_extraction_disabled", ".html and .htm while reader.extract_html is off")
def _(rng, s):
    page = f"<html><body><article><p>{prose(rng)}</p></article></body></html>".encode()
    return [
        *one("formats/page.html", page, "html_extraction_disabled"),
        *one("formats/page.htm", page, "html_extraction_disabled"),
    ]


@_bad_class("unsupported_suffix", "unsupported_format", "objects whose suffix has no reader: .pdf, .bin, .txt.bz2")
def _(rng, s):
    return [
        *one("formats/report.pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", "unsupported_format"),
        *one("formats/blob.bin", bytes(rng.randrange(256) for _ in range(500)), "unsupported_format"),
        *one("formats/text.txt.bz2", b"BZh91AY&SY", "unsupported_format"),
    ]


# -- the formats corpora come in: Parquet, WARC, source files
@_bad_class("truncated_parquet", "corrupt_parquet", "a Parquet file cut in half: its footer, and so every row, is lost")
def _(rng, s):
    data = parquet_file([prose(rng) for _ in range(20)])
    return one("formats/truncated.parquet", data[: len(data) // 2], "corrupt_parquet")


@_bad_class("warc_cut_mid_record", "truncated_record", "a WET file cut inside its last record's body")
def _(rng, s):
    data = wet_file([prose(rng) for _ in range(3)])
    return [BadFile("formats/cut.warc.wet", [data[:-40]], kept=2, quarantined={"truncated_record": 1})]


@_bad_class("binary_under_source_suffix", "nul_bytes", "compiled bytes (NUL-padded) under .py and .c names")
def _(rng, s):
    blob = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + bytes(rng.randrange(256) for _ in range(2000))
    return [
        *one("formats/compiled.py", b"\x33\x0d\x0d\x0a" + b"\x00" * 12 + blob, "nul_bytes"),
        *one("formats/program.c", blob, "nul_bytes"),
    ]
