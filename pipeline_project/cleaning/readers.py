"""Turn one raw object (key + bytes) into Documents, or Quarantined records for what cannot be read.

Nothing here raises on bad input: every failure becomes a Quarantined record with a short reason.
"""

from __future__ import annotations

import codecs
import json
import zlib
from collections.abc import Iterator

import zstandard

from pipeline_project.cleaning.config import CleaningConfig, ReaderConfig
from pipeline_project.cleaning.errors import DecompressedTooLargeError, TruncatedArchiveError, UndecodableError
from pipeline_project.cleaning.records import Document, Quarantined

_CHUNK = 1 << 20
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _inflate(data: bytes, new_decoder, limit: int) -> bytes:
    """Decompress all concatenated members/frames; raise TruncatedArchiveError with what was recovered."""
    out = bytearray()
    rest = data
    while rest:
        dec = new_decoder()
        for start in range(0, len(rest), _CHUNK):
            out += dec.decompress(rest[start : start + _CHUNK])
            if len(out) > limit:
                raise DecompressedTooLargeError(f"inflates past {limit} bytes")
            if dec.eof:
                break
        if not dec.eof:
            raise TruncatedArchiveError(bytes(out))
        rest = dec.unused_data
    return bytes(out)


def decompress(key: str, data: bytes, limit: int) -> bytes:
    lower = key.lower()
    if lower.endswith(".gz"):
        return _inflate(data, lambda: zlib.decompressobj(wbits=31), limit)
    if lower.endswith(".zst") or lower.endswith(".zstd"):
        return _inflate(data, lambda: zstandard.ZstdDecompressor().decompressobj(), limit)
    return data


def decode_bytes(data: bytes, cfg: ReaderConfig) -> tuple[str, str]:
    """Return (text, encoding). Strict UTF-8, then lossy UTF-8 for a few bad bytes, then detection."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(name), name
            except UnicodeDecodeError:
                break
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    lossy = data.decode("utf-8", errors="replace")
    if lossy.count("\ufffd") <= cfg.max_invalid_utf8_fraction * max(len(data), 1):
        return lossy, "utf-8-lossy"
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None or best.encoding is None:
        raise UndecodableError("no encoding fits")
    return str(best), best.encoding


def _strip_ext(key: str) -> str:
    lower = key.lower()
    for ext in (".gz", ".zst", ".zstd"):
        if lower.endswith(ext):
            return lower[: -len(ext)]
    return lower


def _longest_line(data: bytes) -> int:
    longest, start = 0, 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return max(longest, len(data) - start)
        longest = max(longest, end - start)
        start = end + 1


def _has_nul(data: bytes) -> bool:
    # UTF-16/32 text carries NUL bytes legitimately
    return b"\x00" in data and not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def _read_text(key: str, data: bytes, cfg: ReaderConfig) -> Iterator[Document | Quarantined]:
    if _has_nul(data):
        yield Quarantined(key, key, "nul_bytes", f"{data.count(0)} NUL bytes")
        return
    if len(data) > cfg.max_line_bytes and _longest_line(data) > cfg.max_line_bytes:
        yield Quarantined(key, key, "line_too_long", f"a line over {cfg.max_line_bytes} bytes")
        return
    try:
        text, encoding = decode_bytes(data, cfg)
    except UndecodableError as exc:
        yield Quarantined(key, key, "undecodable", str(exc))
        return
    yield Document(id=key, text=text, source=key, meta={"encoding": encoding})


def _read_jsonl(key: str, data: bytes, cfg: ReaderConfig) -> Iterator[Document | Quarantined]:
    field = cfg.text_field
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        doc_id = f"{key}#{line_no}"
        if len(line) > cfg.max_line_bytes:
            yield Quarantined(doc_id, key, "line_too_long", f"{len(line)} bytes > {cfg.max_line_bytes}")
            continue
        if _has_nul(line):
            yield Quarantined(doc_id, key, "nul_bytes", "raw NUL byte in a JSON line")
            continue
        try:
            raw, encoding = decode_bytes(line, cfg)
        except UndecodableError as exc:
            yield Quarantined(doc_id, key, "undecodable", str(exc))
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            yield Quarantined(doc_id, key, "bad_json_line", str(exc)[:200])
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
            yield Quarantined(doc_id, key, "missing_text_field", f"no string field {field!r}")
            continue
        fields = {k: v for k, v in obj.items() if k != field and isinstance(v, str | int | float | bool)}
        yield Document(id=doc_id, text=obj[field], source=key, meta={"encoding": encoding, "fields": fields})


def _read_html(key: str, data: bytes, cfg: ReaderConfig) -> Iterator[Document | Quarantined]:
    try:
        html, encoding = decode_bytes(data, cfg)
    except UndecodableError as exc:
        yield Quarantined(key, key, "undecodable", str(exc))
        return
    import trafilatura

    text = trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=False) or ""
    yield Document(id=key, text=text, source=key, meta={"encoding": encoding, "extracted_from": "html"})


def read_object(key: str, data: bytes, config: CleaningConfig) -> Iterator[Document | Quarantined]:
    """Read one raw object by its extension. Never raises on malformed input."""
    cfg = config.reader
    base = _strip_ext(key)
    if base.endswith((".jsonl", ".json")):
        parse = _read_jsonl
    elif base.endswith(".txt"):
        parse = _read_text
    elif cfg.extract_html and base.endswith(cfg.html_extensions):
        parse = _read_html
    else:
        yield Quarantined(key, key, "unsupported_format", f"no reader for {key!r}")
        return
    truncated = False
    try:
        payload = decompress(key, data, cfg.max_decompressed_bytes)
    except TruncatedArchiveError as exc:
        # keep every complete line that came before the cut; the cut line itself is lost
        payload, truncated = exc.args[0], True
        if parse is _read_jsonl:
            payload = payload[: payload.rfind(b"\n") + 1]
        else:
            payload = b""
    except DecompressedTooLargeError as exc:
        yield Quarantined(key, key, "decompressed_too_large", str(exc))
        return
    except (zlib.error, zstandard.ZstdError) as exc:
        yield Quarantined(key, key, "corrupt_archive", str(exc)[:200])
        return
    if payload:
        yield from parse(key, payload, cfg)
    if truncated:
        yield Quarantined(key, key, "truncated_archive", "archive ended before its end marker")
