"""The classes of malformed input and how each file of a class is built (see `bad_input` for the contract)."""

from __future__ import annotations

import codecs
import gzip
import json
import random
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import zstandard

from pipeline_project.demo.sample_corpus import _doc as prose_document

EXPECTED_NAME = "expected.json"
KEPT = "kept"


@dataclass(frozen=True)
class Scale:
    name: str
    long_line_bytes: int  # the one JSONL line over reader.max_line_bytes
    big_txt_bytes: int  # the .txt over reader.max_document_bytes
    tiny_docs: int  # documents in the many-tiny-documents file
    bomb_bytes: int  # what each decompression bomb inflates to (far past reader.max_decompressed_bytes)
    reader: dict = field(default_factory=dict)  # ReaderConfig fields this scale is read with


SCALES = {
    "small": Scale(
        name="small",
        long_line_bytes=200_000,
        big_txt_bytes=300_000,
        tiny_docs=5_000,
        bomb_bytes=64 << 20,
        reader={"max_line_bytes": 64 << 10, "max_document_bytes": 256 << 10, "max_decompressed_bytes": 8 << 20},
    ),
    "full": Scale(
        name="full",
        long_line_bytes=200_000_000,
        big_txt_bytes=(64 << 20) + (1 << 20),
        tiny_docs=1_000_000,
        bomb_bytes=8 << 30,
    ),
}


@dataclass
class BadFile:
    path: str  # relative to the output directory; becomes the S3 key under the demo's prefix
    chunks: Iterable[bytes]  # written in order, so big files are never whole in memory
    kept: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BadClass:
    name: str
    outcome: str  # "kept" or the one quarantine reason
    description: str
    make: Callable[[random.Random, Scale], list[BadFile]]


# ---- building blocks -----------------------------------------------------------------------------------


def _prose(rng: random.Random, lang: str = "en") -> str:
    return prose_document(rng, lang, 3)


def _line(text: str, **fields) -> bytes:
    return json.dumps({"text": text, **fields}, ensure_ascii=False).encode() + b"\n"


def _good_lines(rng: random.Random, n: int = 2) -> bytes:
    return b"".join(_line(_prose(rng)) for _ in range(n))


def _with_good(rng: random.Random, path: str, bad: list[bytes], reason: str) -> BadFile:
    """Good lines around the bad ones: only the bad lines are quarantined."""
    body = _good_lines(rng, 1) + b"".join(line.rstrip(b"\n") + b"\n" for line in bad) + _good_lines(rng, 1)
    return BadFile(path, [body], kept=2, quarantined={reason: len(bad)})


def _one(path: str, data: bytes, outcome: str, kept: int | None = None) -> list[BadFile]:
    if outcome == KEPT:
        return [BadFile(path, [data], kept=1 if kept is None else kept)]
    return [BadFile(path, [data], quarantined={outcome: 1})]


def _gzip_stream(total: int, chunk: int = 16 << 20) -> bytes:
    """A gzip member of `total` zero bytes, compressed chunk by chunk (never `total` bytes in memory)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * chunk
    out = [comp.compress(zeros) for _ in range(total // chunk)]
    return b"".join([*out, comp.compress(b"\0" * (total % chunk)), comp.flush()])


def _gzip_bomb(total: int) -> bytes:
    member = _gzip_stream(min(total, 1 << 30))  # members of up to 1 GiB, repeated: still one valid gzip file
    return member * max(1, total // (1 << 30))


def _zstd_bomb(total: int) -> bytes:
    frame_size = min(total, 256 << 20)
    frame = zstandard.ZstdCompressor().compress(b"\0" * frame_size)
    return frame * max(1, total // frame_size)


def _tiny_docs(n: int) -> Iterator[bytes]:
    for start in range(0, n, 50_000):
        yield b"".join(b'{"text": "tiny document number %d"}\n' % i for i in range(start, min(n, start + 50_000)))


def _long_line(rng: random.Random, size: int) -> Iterator[bytes]:
    yield _good_lines(rng, 1) + b'{"text": "'
    block = b"all work and no play makes a very long line " * 1000
    left = size
    while left > 0:
        yield block[:left]
        left -= len(block)
    yield b'"}\n' + _good_lines(rng, 1)


def _big_txt(rng: random.Random, size: int) -> Iterator[bytes]:
    block = (_prose(rng) + "\n\n").encode()
    block = block * max(1, (1 << 20) // len(block))
    left = size
    while left > 0:
        yield block[:left]
        left -= len(block)


# ---- the classes ---------------------------------------------------------------------------------------


def _classes() -> list[BadClass]:
    c = []

    def add(name: str, outcome: str, description: str):
        def register(make):
            c.append(BadClass(name, outcome, description, make))
            return make

        return register

    # -- encodings
    @add("utf8_few_invalid_bytes", KEPT, "UTF-8 prose with one invalid byte in thousands: decoded with U+FFFD")
    def _(rng, s):
        text = _prose(rng).encode()
        return _one("encodings/few_invalid_bytes.txt", text[:200] + b"\xff" + text[200:], KEPT)

    @add("invalid_utf8_no_encoding_fits", "undecodable", "bytes 0x80-0xFF at random: invalid UTF-8, no encoding fits")
    def _(rng, s):
        return _one("encodings/high_bytes.txt", bytes(rng.randrange(0x80, 0x100) for _ in range(4000)), "undecodable")

    @add("legacy_latin1", KEPT, "French prose in Latin-1: detected and converted")
    def _(rng, s):
        return _one("encodings/latin1.txt", _prose(rng, "fr").encode("latin-1", "replace"), KEPT)

    @add("utf16_with_bom", KEPT, "UTF-16 LE and BE with a BOM, as .txt")
    def _(rng, s):
        return [
            *_one("encodings/utf16le_bom.txt", _prose(rng, "de").encode("utf-16"), KEPT),
            *_one("encodings/utf16be_bom.txt", codecs.BOM_UTF16_BE + _prose(rng).encode("utf-16-be"), KEPT),
        ]

    @add("utf16_without_bom", KEPT, "UTF-16 LE and BE without a BOM, recognised by where the NUL bytes fall")
    def _(rng, s):
        return [
            *_one("encodings/utf16le_nobom.txt", _prose(rng, "fr").encode("utf-16-le"), KEPT),
            *_one("encodings/utf16be_nobom.txt", _prose(rng).encode("utf-16-be"), KEPT),
        ]

    @add("utf16_jsonl", KEPT, "JSON Lines in UTF-16, with a BOM (LE) and without one (BE)")
    def _(rng, s):
        return [
            BadFile("encodings/utf16_bom.jsonl", [_good_lines(rng, 3).decode().encode("utf-16")], kept=3),
            BadFile("encodings/utf16be_nobom.jsonl", [_good_lines(rng, 3).decode().encode("utf-16-be")], kept=3),
        ]

    @add("utf32", KEPT, "UTF-32 with a BOM (LE and BE) and without one (LE)")
    def _(rng, s):
        return [
            *_one("encodings/utf32le_bom.txt", _prose(rng).encode("utf-32"), KEPT),
            *_one("encodings/utf32be_bom.txt", codecs.BOM_UTF32_BE + _prose(rng).encode("utf-32-be"), KEPT),
            *_one("encodings/utf32le_nobom.txt", _prose(rng).encode("utf-32-le"), KEPT),
        ]

    @add("utf8_bom_jsonl", KEPT, "JSON Lines starting with a UTF-8 BOM")
    def _(rng, s):
        return [BadFile("encodings/utf8_bom.jsonl", [codecs.BOM_UTF8 + _good_lines(rng, 2)], kept=2)]

    @add("bom_that_lies", "undecodable", "a UTF-16 BOM followed by an unpaired surrogate, or an odd byte count")
    def _(rng, s):
        data = codecs.BOM_UTF16_LE + _prose(rng).encode("utf-16-le") + b"\x00\xd8" + "end".encode("utf-16-le")
        return [
            *_one("encodings/utf16_unpaired_surrogate.txt", data, "undecodable"),
            *_one(
                "encodings/utf16_odd_length.jsonl", _good_lines(rng, 1).decode().encode("utf-16") + b"!", "undecodable"
            ),
        ]

    @add("crlf_line_endings", KEPT, "JSON Lines with Windows line endings")
    def _(rng, s):
        return [BadFile("encodings/crlf.jsonl", [_good_lines(rng, 3).replace(b"\n", b"\r\n")], kept=3)]

    # -- bytes that are not text
    @add("nul_bytes", "nul_bytes", "NUL bytes in a UTF-8 .txt, and in one JSON line")
    def _(rng, s):
        return [
            *_one("bytes/nul.txt", _prose(rng).encode().replace(b" ", b"\x00", 3), "nul_bytes"),
            _with_good(rng, "bytes/nul_line.jsonl", [b'{"text": "a\x00b"}'], "nul_bytes"),
        ]

    @add("binary_without_nul", "binary_content", "random bytes 0x01-0xFF (no NUL) renamed .txt")
    def _(rng, s):
        return _one("bytes/binary.txt", bytes(rng.randrange(1, 256) for _ in range(8000)), "binary_content")

    @add("empty_objects", "empty_object", "zero-byte objects: .txt, .jsonl, and a gzip of nothing")
    def _(rng, s):
        return [
            *_one("bytes/empty.txt", b"", "empty_object"),
            *_one("bytes/empty.jsonl", b"", "empty_object"),
            *_one("bytes/empty.txt.gz", gzip.compress(b"", mtime=0), "empty_object"),
        ]

    @add("whitespace_only", "empty_object", "objects of spaces, tabs and newlines (ASCII, and U+3000 in UTF-8)")
    def _(rng, s):
        return [
            *_one("bytes/whitespace.txt", b" \t\r\n \n", "empty_object"),
            *_one("bytes/blank_lines.jsonl", b"\n\n   \n\t\n", "empty_object"),
            *_one("bytes/ideographic_space.txt", "\u3000\u3000\n".encode(), "empty_object"),
        ]

    @add("control_characters", KEPT, "prose with a few BEL / ESC / backspace characters (ftfy removes them later)")
    def _(rng, s):
        text = _prose(rng)
        return _one("bytes/control_chars.txt", ("\x07" + text[:100] + "\x1b[1m\b" + text[100:]).encode(), KEPT)

    @add("lone_surrogates", KEPT, 'JSON "\\ud800"-style escapes: repaired to U+FFFD at read time')
    def _(rng, s):
        lines = [
            b'{"text": "half an emoji \\ud83d and the rest", "title": "t\\udc00"}\n',
            b'{"text": "\\udfff\\ud800 backwards pair"}\n',
        ]
        return [BadFile("bytes/lone_surrogates.jsonl", [b"".join(lines)], kept=2)]

    # -- JSON problems
    @add("json_not_an_object", "not_an_object", "valid JSON lines that are arrays, strings, numbers, null")
    def _(rng, s):
        return [_with_good(rng, "json/not_object.jsonl", [b"[1, 2]", b'"a string"', b"42", b"null"], "not_an_object")]

    @add("json_missing_text", "missing_text_field", "JSON objects without a text field")
    def _(rng, s):
        return [_with_good(rng, "json/missing_text.jsonl", [b'{"body": "x"}', b"{}"], "missing_text_field")]

    @add("json_text_not_string", "text_not_string", "a text field that is a number, null, a list or an object")
    def _(rng, s):
        bad = [b'{"text": 5}', b'{"text": null}', b'{"text": ["a"]}', b'{"text": {"a": 1}}']
        return [_with_good(rng, "json/text_not_string.jsonl", bad, "text_not_string")]

    @add("json_deep_nesting", "json_too_deep", "lines nested 20,000 levels deep (RecursionError in json.loads)")
    def _(rng, s):
        bad = [b"[" * 20_000 + b"]" * 20_000, b'{"text": "x", "a": ' + b"[" * 20_000]
        return [_with_good(rng, "json/deep.jsonl", bad, "json_too_deep")]

    @add("json_syntax_errors", "bad_json_line", "unterminated strings, trailing commas, raw control bytes in strings")
    def _(rng, s):
        bad = [b'{"text": "unterminated', b'{"text": "a",}', b"not json at all", b'{"text": "tab\x01here"}']
        return [_with_good(rng, "json/syntax.jsonl", bad, "bad_json_line")]

    @add("json_pretty_printed", "bad_json_line", ".json is JSON Lines: a pretty-printed file is bad line by line")
    def _(rng, s):
        body = json.dumps({"text": _prose(rng), "id": 1}, indent=2).encode() + b"\n"
        return [BadFile("json/pretty.json", [body], quarantined={"bad_json_line": body.count(b"\n")})]

    # -- archives
    @add("truncated_archives", "truncated_archive", "a .txt.gz and a .txt.zst cut in half")
    def _(rng, s):
        gz = gzip.compress(_prose(rng).encode(), mtime=0)
        zst = zstandard.ZstdCompressor(write_checksum=True).compress(_prose(rng).encode())
        return [
            *_one("archives/truncated.txt.gz", gz[: len(gz) // 2], "truncated_archive"),
            *_one("archives/truncated.txt.zst", zst[: len(zst) // 2], "truncated_archive"),
        ]

    @add("gzip_without_trailer", "truncated_archive", "a .jsonl.gz without its 8-byte trailer: all lines kept")
    def _(rng, s):
        data = gzip.compress(_good_lines(rng, 3), mtime=0)[:-8]
        return [BadFile("archives/no_trailer.jsonl.gz", [data], kept=3, quarantined={"truncated_archive": 1})]

    @add("corrupt_archives", "corrupt_archive", "gzip and zstd whose checksum does not match; zstd magic + garbage")
    def _(rng, s):
        gz = bytearray(gzip.compress(_good_lines(rng, 2), mtime=0))
        gz[-5] ^= 0xFF  # the CRC-32 in the trailer
        zst = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(_good_lines(rng, 2)))
        zst[-1] ^= 0xFF  # the content checksum
        garbage = b"\x28\xb5\x2f\xfd" + bytes(rng.randrange(256) for _ in range(2000))
        return [
            *_one("archives/bad_crc.jsonl.gz", bytes(gz), "corrupt_archive"),
            *_one("archives/bad_checksum.jsonl.zst", bytes(zst), "corrupt_archive"),
            *_one("archives/garbage.txt.zst", garbage, "corrupt_archive"),
        ]

    @add("double_compressed", "binary_content", "a gzip inside a gzip: once inflated, it is still not text")
    def _(rng, s):
        inner = gzip.compress(_good_lines(rng, 20), mtime=0)
        return _one("archives/double.jsonl.gz", gzip.compress(inner, mtime=0), "binary_content")

    @add("plain_text_named_gz", "corrupt_archive", "plain text under a .txt.gz name")
    def _(rng, s):
        return _one("archives/not_gzip.txt.gz", _prose(rng).encode(), "corrupt_archive")

    @add("compressed_under_plain_name", KEPT, "gzip content named .jsonl, zstd content named .txt: magic bytes decide")
    def _(rng, s):
        return [
            BadFile("archives/gzip_inside.jsonl", [gzip.compress(_good_lines(rng, 2), mtime=0)], kept=2),
            *_one("archives/zstd_inside.txt", zstandard.ZstdCompressor().compress(_prose(rng).encode()), KEPT),
        ]

    @add("gzip_multi_member", KEPT, "three gzip members concatenated (as `cat a.gz b.gz c.gz` makes)")
    def _(rng, s):
        data = b"".join(gzip.compress(_good_lines(rng, 1), mtime=0) for _ in range(3))
        return [BadFile("archives/multi_member.jsonl.gz", [data], kept=3)]

    @add("decompression_bombs", "decompressed_too_large", "gzip and zstd of zeros inflating far past the cap")
    def _(rng, s):
        return [
            *_one("archives/bomb.jsonl.gz", _gzip_bomb(s.bomb_bytes), "decompressed_too_large"),
            *_one("archives/bomb.txt.zst", _zstd_bomb(s.bomb_bytes), "decompressed_too_large"),
        ]

    # -- size
    @add("line_too_long", "line_too_long", "one JSONL line of 200 MB (full scale) between two good lines")
    def _(rng, s):
        return [BadFile("size/long_line.jsonl", _long_line(rng, s.long_line_bytes), 2, {"line_too_long": 1})]

    @add("txt_over_document_cap", "document_too_large", "a .txt larger than reader.max_document_bytes")
    def _(rng, s):
        return [BadFile("size/huge.txt", _big_txt(rng, s.big_txt_bytes), quarantined={"document_too_large": 1})]

    @add("many_tiny_documents", KEPT, "a million one-line documents in one .jsonl (full scale)")
    def _(rng, s):
        return [BadFile("size/tiny_docs.jsonl", _tiny_docs(s.tiny_docs), kept=s.tiny_docs)]

    # -- keys and formats
    @add("unusual_keys", KEPT, "keys with spaces, NFC and NFD accents, CJK, emoji, and an upper-case suffix")
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
            data = _good_lines(rng, 1) if name.lower().endswith(".jsonl") else _prose(rng).encode()
            out += _one(f"keys/{name}", data, KEPT)
        return out

    @add("html_without_extraction", "html_extraction_disabled", ".html and .htm while reader.extract_html is off")
    def _(rng, s):
        page = f"<html><body><article><p>{_prose(rng)}</p></article></body></html>".encode()
        return [
            *_one("formats/page.html", page, "html_extraction_disabled"),
            *_one("formats/page.htm", page, "html_extraction_disabled"),
        ]

    @add("unsupported_suffix", "unsupported_format", "objects whose suffix has no reader: .pdf, .bin, .txt.bz2")
    def _(rng, s):
        return [
            *_one("formats/report.pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", "unsupported_format"),
            *_one("formats/blob.bin", bytes(rng.randrange(256) for _ in range(500)), "unsupported_format"),
            *_one("formats/text.txt.bz2", b"BZh91AY&SY", "unsupported_format"),
        ]

    return c


CLASSES = _classes()
