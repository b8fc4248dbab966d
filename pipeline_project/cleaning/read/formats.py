"""How the bytes of one decompressed object become records, by format (`readers.FORMATS`): a .txt document, an
.html page (trafilatura), JSON Lines; and the small helpers the readers share (quarantine details, blank and
binary tests)."""

from __future__ import annotations

import json
import math
import re

from pipeline_project.cleaning.config import CleaningConfig, ReaderConfig
from pipeline_project.cleaning.errors import UndecodableError
from pipeline_project.cleaning.read.encodings import decode_bytes, repair_surrogates
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
        yield Quarantined(key, key, "html_extraction_failed", exc_detail(exc, config))
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


def _read_jsonl(key: str, data: bytes | bytearray, config: CleaningConfig, encoding: str | None):
    """One record per non-blank line, numbered from 1; lines are measured in place and sliced only when kept."""
    start, line_no, n = 0, 0, len(data)
    while start < n:
        end = data.find(b"\n", start)
        end = n if end < 0 else end
        line_no += 1
        yield from jsonl_line(key, line_no, data, start, end, config, encoding)
        start = end + 1


PARSERS = {"text": _read_text, "jsonl": _read_jsonl, "html": _read_html}
