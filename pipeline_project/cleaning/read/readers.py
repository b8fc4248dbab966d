"""Turn one raw object (key + bytes, or key + blocks of bytes) into Documents, or Quarantined records for what
cannot be read. `read_object` reads bytes in hand; `read_stream` reads an object as its blocks arrive. Both
parse a JSONL object line by line in memory that does not grow with it, and inflate and transcode a .txt / .html
document only up to `reader.max_document_bytes`. The formats' parsers are in `reader_formats.py`.

The guarantee: `read_object` never raises on input, and every object yields at least one record. A failure
of one record (a JSONL line) quarantines that record and the rest of the object is still read; a failure of
the object quarantines the object. Each Quarantined carries one short machine reason from `REASONS`, and a
`detail` that never quotes the input beyond a short, PII-masked snippet. Every Document's text and meta can be
encoded as UTF-8 and JSON (lone surrogates are replaced with U+FFFD at read time).

Formats: `suffixes.SUPPORTED_SUFFIXES` is the one list; `ingest.is_supported` and the dispatch here both use it.

    .txt            one document per object
    .jsonl, .json   JSON Lines: one JSON object per line, its `reader.text_field` string is the document.
                    `.json` means the same (a pretty-printed JSON file is quarantined line by line)
    .html, .htm     one document per object, extracted with trafilatura when `reader.extract_html`;
                    otherwise quarantined `html_extraction_disabled`
    .py, .go, ...   source files (`suffixes.SOURCE_EXTENSIONS`): one document, with its path and language
    .parquet        one document per row, a row group at a time (`parquet.py`)
    .warc, .wet     one document per WET conversion or WARC HTML / text response (`warc.py`)
    .tar, .zip      every member read as an object of its own (`containers.py`)

each plain or compressed (.gz, .zst, .zstd; see `archives.py`) but .parquet and .zip. Magic bytes decide the
codec, so gzip content under a .jsonl name is read. UTF-8 (with or without BOM), UTF-16 and UTF-32 (with a BOM,
or recognised by where their NUL bytes fall) are read; other encodings are detected with charset-normalizer.
"""

from __future__ import annotations

import codecs
import itertools
import zlib
from collections.abc import Iterable, Iterator

import zstandard

from pipeline_project.cleaning.config import CleaningConfig, ReaderConfig
from pipeline_project.cleaning.errors import (
    DecompressedTooLargeError,
    DocumentTooLargeError,
    TruncatedArchiveError,
    UndecodableError,
)
from pipeline_project.cleaning.read.archives import codec_of, inflate_stream
from pipeline_project.cleaning.read.containers import read_tar, read_zip
from pipeline_project.cleaning.read.encodings import transcode_stream, transcode_wide, wide_codecs
from pipeline_project.cleaning.read.formats import PARSERS, detail, exc_detail, is_binary, is_blank, jsonl_line
from pipeline_project.cleaning.read.parquet import read_parquet
from pipeline_project.cleaning.read.reasons import REASONS
from pipeline_project.cleaning.read.streams import StreamCut
from pipeline_project.cleaning.read.suffixes import (
    FORMATS,
    SUPPORTED_SUFFIXES,
    UNCOMPRESSED,
    format_of,
    is_supported,
    split_suffix,
)
from pipeline_project.cleaning.read.warc import read_warc
from pipeline_project.cleaning.records import Document, Quarantined

__all__ = [
    "FORMATS",
    "REASONS",
    "SUPPORTED_SUFFIXES",
    "format_of",
    "is_supported",
    "read_object",
    "read_stream",
    "split_suffix",
]

# formats read from the whole (inflated) stream of pieces by a reader of their own
_PIECE_READERS = {"parquet": read_parquet, "warc": read_warc, "tar": read_tar, "zip": read_zip}
_CONTAINER_READERS = {"tar", "zip"}
# ---- objects -------------------------------------------------------------------------------------------


def _object_verdict(fmt: str, payload: bytes | bytearray, cfg: ReaderConfig) -> tuple[str, str] | None:
    """(reason, detail) when the whole decompressed object is refused before parsing, else None."""
    if fmt != "jsonl" and len(payload) > cfg.max_document_bytes:
        return "document_too_large", f"{len(payload)} bytes > {cfg.max_document_bytes}"
    if fmt != "jsonl" and b"\x00" in payload:
        return "nul_bytes", f"{payload.count(0)} NUL bytes"
    if is_binary(payload, cfg):
        return "binary_content", "control bytes: not text"
    return None


def _read(key: str, blocks: Iterable[bytes], first: bytes, config: CleaningConfig, path: str | None = None) -> Iterator:
    """The records of an object given as `blocks` (`first` is the first one, for the magic bytes; `path`: an
    archive member's path in its archive)."""
    cfg = config.reader
    kind = split_suffix(key)
    if kind is None:
        yield Quarantined(key, key, "unsupported_format", "no reader for this suffix (readers.SUPPORTED_SUFFIXES)")
        return
    fmt, named_codec = kind
    if fmt == "html" and not cfg.extract_html:
        yield Quarantined(key, key, "html_extraction_disabled", "reader.extract_html is off")
        return
    if fmt == "jsonl":  # line by line: memory holds a line, however large the object inflates
        yield from _stream_jsonl(key, first, blocks, named_codec, config)
        return
    if fmt in _PIECE_READERS:  # record by record, member by member, row group by row group
        yield from _read_pieces(key, fmt, blocks, None if fmt in UNCOMPRESSED else codec_of(first, named_codec), config)
        return
    # one document: inflated up to the document limit, never further
    codec = codec_of(first, named_codec)
    outcome: list[tuple[str, str]] = []
    raw = inflate_stream(blocks, codec, cfg.max_document_bytes) if codec else blocks
    payload = bytearray()
    for piece in _stream_failures(raw, codec, config, outcome, cfg.max_document_bytes):
        payload += piece
    if outcome and outcome[0][0] == "object_too_large":
        yield Quarantined(key, key, "document_too_large", f"more than {cfg.max_document_bytes} bytes")
    elif outcome and outcome[0][0] != "truncated_archive":
        yield Quarantined(key, key, *outcome[0])
    else:
        yield from _parse_payload(key, fmt, payload, bool(outcome), config, path)


def _read_pieces(key: str, fmt: str, blocks: Iterable[bytes], codec: str | None, config: CleaningConfig):
    """The records of a Parquet, WARC, tar or zip object: its (inflated) pieces go to the format's reader."""
    limit = config.reader.max_decompressed_bytes
    outcome: list[tuple[str, str]] = []
    raw = inflate_stream(blocks, codec, limit) if codec else blocks
    pieces = _stream_failures(raw, codec, config, outcome, limit)
    if fmt in _CONTAINER_READERS:
        yield from _PIECE_READERS[fmt](key, pieces, outcome, config, read_member=_member_reader(config))
    else:
        yield from _PIECE_READERS[fmt](key, pieces, outcome, config)


def _member_reader(config: CleaningConfig):
    """How an archive reads a member: as an object of its own, accounted for (`containers.MemberReader`)."""

    def read_member(member_key: str, blocks: Iterable[bytes], path: str) -> Iterator[Document | Quarantined]:
        it = iter(blocks)
        first = next(it, b"")
        yield from _accounted(member_key, _read(member_key, itertools.chain([first], it), first, config, path), config)

    return read_member


def _parse_payload(
    key: str, fmt: str, payload: bytes | bytearray, truncated: bool, config: CleaningConfig, path: str | None = None
):
    """The records of one whole decompressed object (`truncated`: its archive was cut)."""

    def quarantine(reason: str, text: str) -> Quarantined:
        return Quarantined(key, key, reason, text)

    limit = config.reader.max_document_bytes if fmt != "jsonl" else config.reader.max_decompressed_bytes
    try:
        payload, encoding = transcode_wide(payload, truncated, limit)
    except UndecodableError as exc:
        yield quarantine("undecodable", detail(str(exc), config))
        return
    except DocumentTooLargeError as exc:
        yield quarantine("document_too_large", detail(str(exc), config))
        return
    if truncated:
        # keep every complete JSONL line before the cut; the cut line, and a cut .txt / .html, are lost
        payload = payload[: payload.rfind(b"\n") + 1] if fmt == "jsonl" else b""
    elif is_blank(payload, 3 if payload.startswith(codecs.BOM_UTF8) else 0):
        yield quarantine("empty_object", f"{len(payload)} bytes of whitespace")
        return

    if payload:
        verdict = _object_verdict(fmt, payload, config.reader)
        if verdict is None:
            yield from PARSERS[fmt](key, payload, config, encoding, path)
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
    except (SourceError, StreamCut):  # the network's, or an archive member's cut: for the archive's reader
        raise
    except Exception as exc:  # noqa: BLE001 - the guarantee: the object is accounted for, the batch goes on
        produced = True
        yield Quarantined(key, key, "reader_error", exc_detail(exc, config))
    if not produced:
        yield Quarantined(key, key, "empty_object", "no records")


def read_object(key: str, data: bytes, config: CleaningConfig) -> Iterator[Document | Quarantined]:
    """Read one raw object by its extension. Never raises on input; yields at least one record per object."""
    if len(data) > config.reader.max_decompressed_bytes:
        limit = config.reader.max_decompressed_bytes
        return iter([Quarantined(key, key, "object_too_large", f"{len(data)} bytes > {limit}")])
    return _accounted(key, _read(key, [data], data, config), config)


# the start of a streamed JSONL object on which its object-level checks (binary content, UTF-16/32) are taken
STREAM_WINDOW = 1 << 20


def read_stream(key: str, blocks: Iterable[bytes], config: CleaningConfig) -> Iterator[Document | Quarantined]:
    """`read_object` for an object that arrives as blocks of bytes (ranged GETs), in memory that does not grow
    with the object: a .txt / .html object is read up to the document limit, a JSONL object line by line.

    A JSONL object is parsed line by line as its blocks arrive, decompressed (and transcoded from UTF-16/32) on
    the way, so memory holds one block and one line. Its object-level checks are taken on its first
    `STREAM_WINDOW` bytes. Where the stream fails (a cut or corrupt archive, or past `max_decompressed_bytes`),
    the lines before are kept and the rest of the object is one quarantine record, so every part of it is
    accounted for. Never raises on input; an error of `blocks` itself (the network, the store) propagates.
    """
    source = _guarded(blocks)
    try:
        first = next(source, b"")
        yield from _accounted(key, _read(key, itertools.chain([first], source), first, config), config)
    except SourceError as exc:
        raise exc.__cause__ from None


def _stream_failures(pieces: Iterable[bytes], codec: str | None, config: CleaningConfig, outcome: list, limit: int):
    """`pieces` until the stream fails; the failure's (reason, detail) is appended to `outcome`."""
    total = 0
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
    codec = codec_of(first, named_codec)
    outcome: list[tuple[str, str]] = []
    raw = inflate_stream(blocks, codec, cfg.max_decompressed_bytes) if codec else blocks
    pieces: Iterable[bytes] = _stream_failures(raw, codec, config, outcome, cfg.max_decompressed_bytes)

    buf = bytearray()
    for piece in pieces:
        buf += piece
        if len(buf) >= STREAM_WINDOW:
            break
    if len(buf) < STREAM_WINDOW:  # all of it is here: read it whole
        if outcome and outcome[0][0] != "truncated_archive":
            yield Quarantined(key, key, *outcome[0])
        else:
            yield from _parse_payload(key, "jsonl", buf, bool(outcome), config)
        return
    encoding = _wide_codec(buf)
    if encoding == "":
        yield Quarantined(key, key, "undecodable", f"a byte-order mark, but the first {STREAM_WINDOW} bytes differ")
        return
    if encoding is not None:  # UTF-16/32: transcoded to UTF-8 on the way
        pieces = _transcoded(itertools.chain([bytes(buf)], pieces), encoding, outcome)
        buf = bytearray()
    elif is_binary(buf, cfg):
        yield Quarantined(key, key, "binary_content", f"control bytes in the first {STREAM_WINDOW} bytes: not text")
        return
    yield from _stream_lines(key, buf, pieces, encoding, config, outcome)


def _stream_lines(
    key: str,
    buf: bytearray,
    pieces: Iterable[bytes],
    encoding: str | None,
    config: CleaningConfig,
    outcome: list[tuple[str, str]],
):
    """The JSONL records of `buf` and then `pieces`, line by line; a line longer than `max_line_bytes` is
    counted, not held, and becomes one quarantine record."""
    cap = config.reader.max_line_bytes
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
            yield from jsonl_line(key, line_no, buf, start, end, config, encoding)
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
        yield from jsonl_line(key, line_no + 1, buf, 0, len(buf), config, encoding)


def _wide_codec(window: bytearray) -> str | None:
    """The UTF-16/32 codec a streamed object's first bytes decode in; None: not wide; "": a BOM, but invalid."""
    names, bommed = wide_codecs(window[: len(window) - len(window) % 4])
    for name in names:
        try:
            codecs.getincrementaldecoder(name)("strict").decode(bytes(window))
        except UnicodeDecodeError:
            continue
        return name
    return "" if bommed else None


def _transcoded(pieces: Iterable[bytes], name: str, outcome: list) -> Iterator[bytes]:
    """`transcode_stream` until the text stops decoding; that failure is appended to `outcome`."""
    try:
        yield from transcode_stream(pieces, name)
    except UnicodeDecodeError:
        outcome.append(("undecodable", f"not {name} beyond this point"))
