"""How the bytes of one decompressed object become records, by format (`suffixes.FORMATS`): a .txt document, an
.html page (trafilatura), JSON Lines, a source file; the record builders the other readers share (a text, a page,
a JSON object or Parquet row); and the small helpers (quarantine details, blank and binary tests)."""

from __future__ import annotations

import json
import math
import re

from pipeline_project.cleaning.config import CleaningConfig, ReaderConfig
from pipeline_project.cleaning.errors import UndecodableError
from pipeline_project.cleaning.read.encodings import decode_bytes, repair_surrogates
from pipeline_project.cleaning.read.suffixes import source_language, source_path
from pipeline_project.cleaning.records import Document, Quarantined
from pipeline_project.cleaning.steps.pii import mask_pii

_DETAIL_CHARS = 120
_NON_SPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # for details; documents go through repair_surrogates
# NUL is left out: it has a reason of its own (`nul_bytes`), checked first
_CONTROL = frozenset([*range(0x01, 0x09), *range(0x0E, 0x20), 0x7F])
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROL)
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


# ---- small helpers -------------------------------------------------------------------------------------


def detail(text: str, config: CleaningConfig) -> str:
    """A quarantine detail: short, one line, PII-masked, encodable. Never more of the input than this."""
    text = _SURROGATE.sub("\ufffd", " ".join(str(text).split()))[: _DETAIL_CHARS * 2]
    if config.pii.enabled:
        text = mask_pii(text, config.pii)[0]
    return text[:_DETAIL_CHARS]


def exc_detail(exc: BaseException, config: CleaningConfig) -> str:
    return detail(f"{type(exc).__name__}: {exc}", config)


def _document(doc_id: str, text: str, source: str, meta: dict) -> Document:
    text, repaired = repair_surrogates(text)
    if repaired:
        meta["repaired"] = {"lone_surrogates": repaired}
    return Document(id=doc_id, text=text, source=source, meta=meta)


def is_blank(data: bytes | bytearray, start: int = 0, end: int | None = None) -> bool:
    return _NON_SPACE.search(data, start, len(data) if end is None else end) is None


def is_binary(data: bytes | bytearray, cfg: ReaderConfig) -> bool:
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


def text_record(doc_id: str, source: str, data: bytes | bytearray, config: CleaningConfig, encoding, meta=None):
    """The document of a whole text (a .txt object, a source file, a WET record), or its quarantine record."""
    cfg = config.reader
    if len(data) > cfg.max_line_bytes and _longest_line(data) > cfg.max_line_bytes:
        return Quarantined(doc_id, source, "line_too_long", f"a line over {cfg.max_line_bytes} bytes")
    try:
        text, found = decode_bytes(data, cfg)
    except UndecodableError as exc:
        return Quarantined(doc_id, source, "undecodable", detail(str(exc), config))
    if not text or text.isspace():
        return Quarantined(doc_id, source, "empty_object", "whitespace only")
    return _document(doc_id, text, source, {"encoding": encoding or found, **(meta or {})})


def html_record(doc_id: str, source: str, data: bytes | bytearray, config: CleaningConfig, encoding, meta=None):
    """The main text of a page (trafilatura), or its quarantine record."""
    try:
        html, found = decode_bytes(data, config.reader)
    except UndecodableError as exc:
        return Quarantined(doc_id, source, "undecodable", detail(str(exc), config))
    if not html or html.isspace():
        return Quarantined(doc_id, source, "empty_object", "whitespace only")
    try:
        import trafilatura

        text = trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=False) or ""
    except Exception as exc:  # noqa: BLE001 - lxml / trafilatura failures on hostile HTML quarantine the page
        return Quarantined(doc_id, source, "html_extraction_failed", exc_detail(exc, config))
    return _document(doc_id, text, source, {"encoding": encoding or found, "extracted_from": "html", **(meta or {})})


def _read_text(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None, path=None):
    yield text_record(key, key, data, config, encoding)


def _read_html(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None, path=None):
    yield html_record(key, key, data, config, encoding)


def _read_source(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None, path=None):
    """A source file: one document with its path and its language (from the suffix, as The Stack names it) in
    meta["fields"], which route it to the code profile. `path`: its path in an archive, else its key."""
    path = path or source_path(key)
    fields = {"path": path, "language": source_language(path) or "unknown"}
    yield text_record(key, key, data, config, encoding, {"fields": fields})


def fields_of(obj: dict, text_field: str | None, config: CleaningConfig) -> dict:
    """The scalar fields beside the text (only `reader.meta_fields` when set), carried into the shards'
    meta["fields"].

    Strings are PII-masked exactly as the text is (when the PII step is on), so the shards never keep in meta
    what they mask in the text; non-finite floats (NaN, Infinity), nested values and other types are left out.
    """
    fields = {}
    wanted = config.reader.meta_fields
    for k, v in obj.items():
        if k == text_field or (wanted is not None and k not in wanted):
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
        fields[repair_surrogates(str(k))[0]] = v
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
        return quarantine("not_an_object", f"a JSON {_type_name(obj)}, not an object")
    return object_record(doc_id, key, obj, config, encoding or found)


def _type_name(value) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def text_field_of(names, cfg: ReaderConfig) -> str | None:
    """The field holding the text among `names`: `reader.text_field`, else the first fallback present."""
    return next((f for f in (cfg.text_field, *cfg.text_field_fallbacks) if f in names), None)


def object_record(doc_id: str, key: str, obj: dict, config: CleaningConfig, encoding: str) -> Document | Quarantined:
    """The document of one record (a JSON object, a Parquet row): its text field's string and its other fields;
    a record without a text field, or whose text is not a string, is quarantined."""
    field = text_field_of(obj, config.reader)
    if field is None:
        return Quarantined(doc_id, key, "missing_text_field", f"no field {config.reader.text_field!r}")
    text = obj[field]
    if not isinstance(text, str):
        return Quarantined(doc_id, key, "text_not_string", f"{field!r} is a {_type_name(text)}")
    return _document(doc_id, text, key, {"encoding": encoding, "fields": fields_of(obj, field, config)})


def jsonl_line(key: str, line_no: int, data: bytes | bytearray, start: int, end: int, config, encoding):
    """The record of line `line_no` (bytes start:end of `data`), or nothing for a blank line."""
    if is_blank(data, start, end):
        return
    doc_id = f"{key}#{line_no}"
    cap = config.reader.max_line_bytes
    if end - start > cap:
        yield Quarantined(doc_id, key, "line_too_long", f"{end - start} bytes > {cap}")
        return
    try:
        yield _json_record(doc_id, key, data[start:end], config, encoding)
    except Exception as exc:  # noqa: BLE001 - one bad line never ends the object
        yield Quarantined(doc_id, key, "reader_error", exc_detail(exc, config))


def _read_jsonl(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None, path=None):
    """One record per non-blank line, numbered from 1; lines are measured in place and sliced only when kept."""
    start, line_no, n = 0, 0, len(data)
    while start < n:
        end = data.find(b"\n", start)
        end = n if end < 0 else end
        line_no += 1
        yield from jsonl_line(key, line_no, data, start, end, config, encoding)
        start = end + 1


PARSERS = {"text": _read_text, "jsonl": _read_jsonl, "html": _read_html, "source": _read_source}
