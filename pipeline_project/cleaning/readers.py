"""Turn one raw object (key + bytes, or key + blocks of bytes) into Documents, or Quarantined records for what
cannot be read. `read_object` reads bytes in hand; `read_stream` reads an object as its blocks arrive, and
parses a JSONL object line by line in memory that does not grow with it.

The guarantee: `read_object` never raises on input, and every object yields at least one record. A failure
of one record (a JSONL line) quarantines that record and the rest of the object is still read; a failure of
the object quarantines the object. Each Quarantined carries one short machine reason from `REASONS`, and a
`detail` that never quotes the input beyond a short, PII-masked snippet. Every Document's text and meta can be
encoded as UTF-8 and JSON (lone surrogates are replaced with U+FFFD at read time).

Formats: `SUPPORTED_SUFFIXES` is the one list; `ingest.is_supported` and the dispatch here both use it.

    .txt            one document per object
    .jsonl, .json   JSON Lines: one JSON object per line, its `reader.text_field` string is the document.
                    `.json` means the same (a pretty-printed JSON file is quarantined line by line)
    .html, .htm     one document per object, extracted with trafilatura when `reader.extract_html`;
                    otherwise quarantined `html_extraction_disabled`

each plain or compressed (.gz, .zst, .zstd; see `archives.py`). Magic bytes decide the codec, so gzip content
under a .jsonl name is read. UTF-8 (with or without BOM), UTF-16 and UTF-32 (with a BOM, or recognised by where
their NUL bytes fall) are read; other encodings are detected with charset-normalizer.
"""

from __future__ import annotations

import codecs
import itertools
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator

import zstandard

from pipeline_project.cleaning.archives import COMPRESSION_SUFFIXES, codec_of, inflate, inflate_stream
from pipeline_project.cleaning.config import CleaningConfig, ReaderConfig
from pipeline_project.cleaning.encodings import decode_bytes, repair_surrogates, transcode_wide, wide_codecs
from pipeline_project.cleaning.errors import DecompressedTooLargeError, TruncatedArchiveError, UndecodableError
from pipeline_project.cleaning.records import Document, Quarantined
from pipeline_project.cleaning.steps.pii import mask_pii

# suffix -> how the (decompressed) bytes are parsed
FORMATS = {".txt": "text", ".jsonl": "jsonl", ".json": "jsonl", ".html": "html", ".htm": "html"}
SUPPORTED_SUFFIXES: tuple[str, ...] = tuple(base + comp for base in FORMATS for comp in ("", *COMPRESSION_SUFFIXES))

REASONS = {
    "unsupported_format": "the key's suffix is not one of SUPPORTED_SUFFIXES",
    "html_extraction_disabled": "an .html / .htm object while reader.extract_html is off",
    "html_extraction_failed": "trafilatura raised on the page",
    "object_too_large": "the object is larger than reader.max_decompressed_bytes",
    "corrupt_archive": "gzip / zstd data that cannot be decompressed",
    "truncated_archive": "the archive ends before its end marker (complete JSONL lines before the cut are kept)",
    "decompressed_too_large": "the archive inflates past reader.max_decompressed_bytes (checked while inflating)",
    "empty_object": "the object holds nothing but whitespace",
    "nul_bytes": "NUL bytes in text (a JSONL line, or a .txt / .html object)",
    "binary_content": "more control bytes than reader.max_control_byte_fraction: not text",
    "undecodable": "no text encoding fits (or a UTF-16/32 BOM with invalid data after it)",
    "document_too_large": "a .txt / .html document larger than reader.max_document_bytes",
    "line_too_long": "a line longer than reader.max_line_bytes",
    "bad_json_line": "a JSONL line that is not valid JSON",
    "json_too_deep": "a JSONL line nested deeper than the JSON parser's recursion limit",
    "not_an_object": "a JSONL line that is valid JSON but not an object",
    "missing_text_field": "a JSON object without reader.text_field",
    "text_not_string": "a JSON object whose reader.text_field is not a string",
    "reader_error": "any other failure while reading (a bug to report; the detail names the exception)",
}

_DETAIL_CHARS = 120
_NON_SPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # for details; documents go through repair_surrogates
# NUL is left out: it has a reason of its own (`nul_bytes`), checked first
_CONTROL = frozenset([*range(0x01, 0x09), *range(0x0E, 0x20), 0x7F])
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROL)
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def split_suffix(key: str) -> tuple[str, str | None] | None:
    """(format, codec named by the suffix) for a supported key, else None. Case-insensitive."""
    lower = key.lower()
    codec = None
    for ext, name in COMPRESSION_SUFFIXES.items():
        if lower.endswith(ext):
            lower, codec = lower[: -len(ext)], name
            break
    for ext, fmt in FORMATS.items():
        if lower.endswith(ext):
            return fmt, codec
    return None


def is_supported(key: str) -> bool:
    return split_suffix(key) is not None


def format_of(key: str) -> str:
    """The supported suffix a key ends with (`.jsonl.gz`), or "other"; for metadata."""
    lower = key.lower()
    return max((s for s in SUPPORTED_SUFFIXES if lower.endswith(s)), key=len, default="other")


# ---- small helpers -------------------------------------------------------------------------------------


def detail(text: str, config: CleaningConfig) -> str:
    """A quarantine detail: short, one line, PII-masked, encodable. Never more of the input than this."""
    text = _SURROGATE.sub("\ufffd", " ".join(str(text).split()))[: _DETAIL_CHARS * 2]
    if config.pii.enabled:
        text = mask_pii(text, config.pii)[0]
    return text[:_DETAIL_CHARS]


def _exc_detail(exc: BaseException, config: CleaningConfig) -> str:
    return detail(f"{type(exc).__name__}: {exc}", config)


def _document(doc_id: str, text: str, source: str, meta: dict) -> Document:
    text, repaired = repair_surrogates(text)
    if repaired:
        meta["repaired"] = {"lone_surrogates": repaired}
    return Document(id=doc_id, text=text, source=source, meta=meta)


def _is_blank(data: bytes | bytearray, start: int = 0, end: int | None = None) -> bool:
    return _NON_SPACE.search(data, start, len(data) if end is None else end) is None


def _is_binary(data: bytes | bytearray, cfg: ReaderConfig) -> bool:
    controls = len(data.translate(None, _NOT_CONTROL))  # what is left are the control bytes: no big copy
    return controls > cfg.max_control_byte_fraction * len(data)


def _longest_line(data: bytes | bytearray) -> int:
    longest, start = 0, 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return max(longest, len(data) - start)
        longest = max(longest, end - start)
        start = end + 1


# ---- formats -------------------------------------------------------------------------------------------


def _read_text(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None):
    cfg = config.reader
    if len(data) > cfg.max_line_bytes and _longest_line(data) > cfg.max_line_bytes:
        yield Quarantined(key, key, "line_too_long", f"a line over {cfg.max_line_bytes} bytes")
        return
    try:
        text, found = decode_bytes(data, cfg)
    except UndecodableError as exc:
        yield Quarantined(key, key, "undecodable", detail(str(exc), config))
        return
    if not text or text.isspace():
        yield Quarantined(key, key, "empty_object", "whitespace only")
        return
    yield _document(key, text, key, {"encoding": encoding or found})


def _read_html(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None):
    try:
        html, found = decode_bytes(data, config.reader)
    except UndecodableError as exc:
        yield Quarantined(key, key, "undecodable", detail(str(exc), config))
        return
    if not html or html.isspace():
        yield Quarantined(key, key, "empty_object", "whitespace only")
        return
    try:
        import trafilatura

        text = trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=False) or ""
    except Exception as exc:  # noqa: BLE001 - lxml / trafilatura failures on hostile HTML quarantine the page
        yield Quarantined(key, key, "html_extraction_failed", _exc_detail(exc, config))
        return
    yield _document(key, text, key, {"encoding": encoding or found, "extracted_from": "html"})


def _fields(obj: dict, text_field: str, config: CleaningConfig) -> dict:
    """The scalar fields beside the text, carried into the shards' meta["fields"].

    Strings are PII-masked exactly as the text is (when the PII step is on), so the shards never keep in meta
    what they mask in the text; non-finite floats (NaN, Infinity) and nested values are left out.
    """
    fields = {}
    for k, v in obj.items():
        if k == text_field:
            continue
        if isinstance(v, str):
            v = repair_surrogates(v)[0]
            if config.pii.enabled:
                v = mask_pii(v, config.pii)[0]
        elif isinstance(v, float):
            if not math.isfinite(v):
                continue
        elif not isinstance(v, int):  # bool is an int
            continue
        fields[repair_surrogates(k)[0]] = v
    return fields


def _json_record(doc_id: str, key: str, line: bytes | bytearray, config: CleaningConfig, encoding: str | None):
    cfg = config.reader

    def quarantine(reason: str, text: str) -> Quarantined:
        return Quarantined(doc_id, key, reason, text)

    if b"\x00" in line:
        return quarantine("nul_bytes", "raw NUL byte in a JSON line")
    try:
        raw, found = decode_bytes(line, cfg)
    except UndecodableError as exc:
        return quarantine("undecodable", detail(str(exc), config))
    try:
        obj = json.loads(raw)
    except RecursionError:
        return quarantine("json_too_deep", "nested deeper than the JSON parser's recursion limit")
    except ValueError as exc:  # JSONDecodeError, and int strings past sys.get_int_max_str_digits()
        return quarantine("bad_json_line", detail(str(exc), config))
    if not isinstance(obj, dict):
        return quarantine("not_an_object", f"a JSON {_JSON_TYPES.get(type(obj), 'null')}, not an object")
    field = cfg.text_field
    if field not in obj:
        return quarantine("missing_text_field", f"no field {field!r}")
    text = obj[field]
    if not isinstance(text, str):
        return quarantine("text_not_string", f"{field!r} is a JSON {_JSON_TYPES.get(type(text), 'null')}")
    fields = _fields(obj, field, config)
    return _document(doc_id, text, key, {"encoding": encoding or found, "fields": fields})


def _jsonl_line(key: str, line_no: int, data: bytes | bytearray, start: int, end: int, config, encoding):
    """The record of line `line_no` (bytes start:end of `data`), or nothing for a blank line."""
    if _is_blank(data, start, end):
        return
    doc_id = f"{key}#{line_no}"
    cap = config.reader.max_line_bytes
    if end - start > cap:
        yield Quarantined(doc_id, key, "line_too_long", f"{end - start} bytes > {cap}")
        return
    try:
        yield _json_record(doc_id, key, data[start:end], config, encoding)
    except Exception as exc:  # noqa: BLE001 - one bad line never ends the object
        yield Quarantined(doc_id, key, "reader_error", _exc_detail(exc, config))


def _read_jsonl(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None):
    """One record per non-blank line, numbered from 1; lines are measured in place and sliced only when kept."""
    start, line_no, n = 0, 0, len(data)
    while start < n:
        end = data.find(b"\n", start)
        end = n if end < 0 else end
        line_no += 1
        yield from _jsonl_line(key, line_no, data, start, end, config, encoding)
        start = end + 1


_PARSERS = {"text": _read_text, "jsonl": _read_jsonl, "html": _read_html}


# ---- objects -------------------------------------------------------------------------------------------


def _object_verdict(fmt: str, payload: bytes | bytearray, cfg: ReaderConfig) -> tuple[str, str] | None:
    """(reason, detail) when the whole decompressed object is refused before parsing, else None."""
    if fmt != "jsonl" and len(payload) > cfg.max_document_bytes:
        return "document_too_large", f"{len(payload)} bytes > {cfg.max_document_bytes}"
    if fmt != "jsonl" and b"\x00" in payload:
        return "nul_bytes", f"{payload.count(0)} NUL bytes"
    if _is_binary(payload, cfg):
        return "binary_content", "control bytes: not text"
    return None


def _read(key: str, data: bytes | bytearray, config: CleaningConfig) -> Iterator[Document | Quarantined]:
    cfg = config.reader

    def quarantine(reason: str, text: str) -> Quarantined:
        return Quarantined(key, key, reason, text)

    kind = split_suffix(key)
    if kind is None:
        yield quarantine("unsupported_format", "no reader for this suffix (readers.SUPPORTED_SUFFIXES)")
        return
    fmt, named_codec = kind
    if fmt == "html" and not cfg.extract_html:
        yield quarantine("html_extraction_disabled", "reader.extract_html is off")
        return
    if len(data) > cfg.max_decompressed_bytes:
        yield quarantine("object_too_large", f"{len(data)} bytes > {cfg.max_decompressed_bytes}")
        return

    truncated = False
    codec = codec_of(data, named_codec)
    payload: bytes | bytearray = data
    if codec is not None and data:
        try:
            payload = inflate(data, codec, cfg.max_decompressed_bytes)
        except TruncatedArchiveError as exc:
            payload, truncated = exc.args[0], True
        except DecompressedTooLargeError as exc:
            yield quarantine("decompressed_too_large", detail(str(exc), config))
            return
        except (zlib.error, zstandard.ZstdError) as exc:
            yield quarantine("corrupt_archive", f"{codec}: " + detail(str(exc), config))
            return
    yield from _parse_payload(key, fmt, payload, truncated, config)


def _parse_payload(key: str, fmt: str, payload: bytes | bytearray, truncated: bool, config: CleaningConfig):
    """The records of one whole decompressed object (`truncated`: its archive was cut)."""

    def quarantine(reason: str, text: str) -> Quarantined:
        return Quarantined(key, key, reason, text)

    try:
        payload, encoding = transcode_wide(payload, truncated)
    except UndecodableError as exc:
        yield quarantine("undecodable", detail(str(exc), config))
        return
    if truncated:
        # keep every complete JSONL line before the cut; the cut line, and a cut .txt / .html, are lost
        payload = payload[: payload.rfind(b"\n") + 1] if fmt == "jsonl" else b""
    elif _is_blank(payload, 3 if payload.startswith(codecs.BOM_UTF8) else 0):
        yield quarantine("empty_object", f"{len(payload)} bytes of whitespace")
        return

    if payload:
        verdict = _object_verdict(fmt, payload, config.reader)
        if verdict is None:
            yield from _PARSERS[fmt](key, payload, config, encoding)
        elif not truncated:  # of a cut archive, the cut is the one reason given
            yield quarantine(*verdict)
    if truncated:
        yield quarantine("truncated_archive", "archive ended before its end marker")


class SourceError(Exception):
    """Reading an object's bytes failed (network, storage): not the input's fault. `read_stream` re-raises the
    cause, so that the caller's retry applies, instead of quarantining the object."""


def _guarded(blocks: Iterable[bytes]) -> Iterator[bytes]:
    it = iter(blocks)
    while True:
        try:
            block = next(it)
        except StopIteration:
            return
        except Exception as exc:
            raise SourceError(str(exc)) from exc
        yield block


def _accounted(key: str, records: Iterator, config: CleaningConfig) -> Iterator[Document | Quarantined]:
    """The guarantee: never raise on input, and at least one record per object."""
    produced = False
    try:
        for item in records:
            produced = True
            yield item
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001 - the guarantee: the object is accounted for, the batch goes on
        produced = True
        yield Quarantined(key, key, "reader_error", _exc_detail(exc, config))
    if not produced:
        yield Quarantined(key, key, "empty_object", "no records")


def read_object(key: str, data: bytes, config: CleaningConfig) -> Iterator[Document | Quarantined]:
    """Read one raw object by its extension. Never raises on input; yields at least one record per object."""
    return _accounted(key, _read(key, data, config), config)


# the start of a streamed JSONL object on which its object-level checks (binary content, UTF-16/32) are taken
STREAM_WINDOW = 1 << 20


def read_stream(key: str, blocks: Iterable[bytes], config: CleaningConfig) -> Iterator[Document | Quarantined]:
    """`read_object` for an object that arrives as blocks of bytes (ranged GETs), in memory that does not grow
    with the object.

    An object that comes in one block, and one that is not JSONL, is read whole, exactly as `read_object` reads
    it. A longer JSONL object is parsed line by line as its blocks arrive, decompressed on the way, so memory holds
    one block and one line. Its object-level checks are taken on its first `STREAM_WINDOW` bytes: binary there
    quarantines the object; UTF-16/32 there reads it whole. Where the stream fails (a cut or corrupt archive, or
    past `max_decompressed_bytes`), the lines before are kept and the rest of the object is one quarantine
    record, so every part of it is accounted for. Never raises on input; an error of `blocks` itself (the
    network, the store) propagates.
    """
    source = _guarded(blocks)
    try:
        first = next(source, b"")
        second = next(source, None)
        kind = split_suffix(key)
        if second is None or kind is None or kind[0] != "jsonl":
            rest = [] if second is None else [second, *source]
            yield from read_object(key, b"".join([first, *rest]) if rest else first, config)
            return
        blocks = itertools.chain([first, second], source)
        yield from _accounted(key, _stream_jsonl(key, first, blocks, kind[1], config), config)
    except SourceError as exc:
        raise exc.__cause__ from None


def _stream_failures(pieces: Iterable[bytes], codec: str | None, config: CleaningConfig, outcome: list):
    """`pieces` until the stream fails; the failure's (reason, detail) is appended to `outcome`."""
    limit, total = config.reader.max_decompressed_bytes, 0
    try:
        for piece in pieces:
            total += len(piece)
            if codec is None and total > limit:
                outcome.append(("object_too_large", f"more than {limit} bytes"))
                return
            yield piece
    except TruncatedArchiveError:
        outcome.append(("truncated_archive", "archive ended before its end marker"))
    except DecompressedTooLargeError as exc:
        outcome.append(("decompressed_too_large", detail(str(exc), config)))
    except (zlib.error, zstandard.ZstdError) as exc:
        outcome.append(("corrupt_archive", f"{codec}: " + detail(str(exc), config)))


def _stream_jsonl(key: str, first: bytes, blocks: Iterable[bytes], named_codec: str | None, config: CleaningConfig):
    cfg = config.reader
    cap = cfg.max_line_bytes
    codec = codec_of(first, named_codec)
    outcome: list[tuple[str, str]] = []
    raw = inflate_stream(blocks, codec, cfg.max_decompressed_bytes) if codec else blocks
    pieces = _stream_failures(raw, codec, config, outcome)

    buf = bytearray()
    for piece in pieces:
        buf += piece
        if len(buf) >= STREAM_WINDOW:
            break
    if len(buf) < STREAM_WINDOW or wide_codecs(buf)[0]:  # all of it is here, or UTF-16/32: read it whole
        for piece in pieces:
            buf += piece
        if outcome and outcome[0][0] != "truncated_archive":
            yield Quarantined(key, key, *outcome[0])
        else:
            yield from _parse_payload(key, "jsonl", buf, bool(outcome), config)
        return
    if _is_binary(buf, cfg):
        yield Quarantined(key, key, "binary_content", f"control bytes in the first {STREAM_WINDOW} bytes: not text")
        return

    line_no = 0
    skipped: int | None = None  # bytes seen of a line longer than `cap`, which is counted, not held
    for piece in itertools.chain([b""], pieces):
        if skipped is not None:
            nl = piece.find(b"\n")
            if nl < 0:
                skipped += len(piece)
                continue
            line_no += 1
            yield Quarantined(f"{key}#{line_no}", key, "line_too_long", f"{skipped + nl} bytes > {cap}")
            skipped, piece = None, piece[nl + 1 :]
        buf += piece
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            line_no += 1
            yield from _jsonl_line(key, line_no, buf, start, end, config, None)
            start = end + 1
        del buf[:start]
        if len(buf) > cap:
            skipped = len(buf)
            buf = bytearray()
    if outcome:  # the line the stream failed in is lost; the rest of the object is this one record
        yield Quarantined(key, key, *outcome[0])
    elif skipped is not None:
        yield Quarantined(f"{key}#{line_no + 1}", key, "line_too_long", f"{skipped} bytes > {cap}")
    elif buf:
        yield from _jsonl_line(key, line_no + 1, buf, 0, len(buf), config, None)
