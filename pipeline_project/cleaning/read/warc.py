"""WARC and WET (Common Crawl), read record by record with warcio, one record at a time in memory.

    conversion            (WET) the extracted text is the document
    response, resource    HTML (text/html, application/xhtml+xml) goes through the HTML extractor (trafilatura,
                          when `reader.extract_html`, else `html_extraction_disabled`); text/plain is a document
                          as it is; other payloads are `warc_unsupported_payload`; a response whose HTTP status
                          is not 2xx is `warc_non_document`
    anything else         warcinfo, request, metadata, revisit: `warc_non_document`, one record each

Every record is accounted for: `key#n` (n counts records from 1) is a document or a quarantine record. A document
keeps the record's WARC-Record-ID, WARC-Target-URI (as `url`), WARC-Date and type in meta["fields"] (and, for WET,
the record it was converted from and Common Crawl's identified languages). A body past `reader.max_document_bytes`
is `document_too_large`; a record whose block ends before its Content-Length is `truncated_record`, and the stream
ends there. The object arrives decompressed (`archives.inflate_stream`: one gzip member per record, as Common Crawl
writes them, capped at `reader.max_decompressed_bytes`), so warcio reads plain WARC.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.read.formats import exc_detail, fields_of, html_record, text_record
from pipeline_project.cleaning.read.streams import reader_over
from pipeline_project.cleaning.records import Document, Quarantined

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain"})
_CONTENT = frozenset({"response", "resource"})
# WARC header -> meta["fields"] name
_KEPT_HEADERS = {
    "WARC-Record-ID": "warc_record_id",
    "WARC-Target-URI": "url",
    "WARC-Date": "warc_date",
    "WARC-Type": "warc_type",
    "WARC-Refers-To": "warc_refers_to",
    "WARC-Identified-Content-Language": "languages",
}


def read_warc(
    key: str, pieces: Iterable[bytes], outcome: list[tuple[str, str]], config: CleaningConfig
) -> Iterator[Document | Quarantined]:
    """The records of one WARC / WET object given as decompressed `pieces` (`outcome`: where they failed)."""
    from warcio.archiveiterator import ArchiveIterator

    n, cut = 0, False
    try:
        for rec in ArchiveIterator(reader_over(pieces), arc2warc=False):
            if not str(rec.format).startswith("warc"):  # warcio also takes ARC, which no .warc / .wet holds
                raise ValueError(f"a record in {rec.format!r} format, not WARC")
            n += 1
            item, cut = _record(f"{key}#{n}", key, rec, config)
            if cut and outcome:  # the record the stream failed in is lost: the outcome below accounts for it
                break
            yield item
            if cut:
                break
    except Exception as exc:  # noqa: BLE001 - warcio's ArchiveLoadFailed, header parse errors: the rest is one record
        if not outcome:
            yield Quarantined(key, key, "corrupt_warc", f"after record {n}: " + exc_detail(exc, config))
    if outcome:
        yield Quarantined(key, key, *outcome[0])


def _record(doc_id: str, key: str, rec, config: CleaningConfig) -> tuple[Document | Quarantined, bool]:
    """(the record's document or quarantine record, whether its block was cut)."""
    kind = rec.rec_type or "unknown"
    if kind == "conversion":
        body, over, cut = _body(rec, config)
    elif kind in _CONTENT:
        status = rec.http_headers.get_statuscode() if rec.http_headers is not None else None
        if status and not status.startswith("2"):
            return Quarantined(doc_id, key, "warc_non_document", f"{kind} with HTTP status {status}"), _drain(rec)
        mime = _mime(rec)
        if mime not in HTML_TYPES and mime not in TEXT_TYPES:
            return Quarantined(doc_id, key, "warc_unsupported_payload", f"Content-Type {mime[:60]!r}"), _drain(rec)
        if mime in HTML_TYPES and not config.reader.extract_html:
            return Quarantined(doc_id, key, "html_extraction_disabled", "reader.extract_html is off"), _drain(rec)
        body, over, cut = _body(rec, config)
    else:
        return Quarantined(doc_id, key, "warc_non_document", f"a {kind[:40]} record"), _drain(rec)
    if cut:
        return Quarantined(doc_id, key, "truncated_record", "the block ends before its Content-Length"), True
    if over:
        return Quarantined(doc_id, key, "document_too_large", f"body over {config.reader.max_document_bytes}"), False
    if b"\x00" in body:
        return Quarantined(doc_id, key, "nul_bytes", f"{body.count(0)} NUL bytes"), False
    headers = {name: rec.rec_headers.get_header(h) for h, name in _KEPT_HEADERS.items()}
    meta = {"fields": fields_of({k: v for k, v in headers.items() if v}, None, config)}
    try:
        if kind != "conversion" and _mime(rec) in HTML_TYPES:
            return html_record(doc_id, key, body, config, None, meta), False
        return text_record(doc_id, key, body, config, None, meta), False
    except Exception as exc:  # noqa: BLE001 - one bad record never ends the file
        return Quarantined(doc_id, key, "reader_error", exc_detail(exc, config)), False


def _mime(rec) -> str:
    headers = rec.http_headers if rec.rec_type == "response" and rec.http_headers is not None else rec.rec_headers
    return (headers.get_header("Content-Type") or "").split(";")[0].strip().lower()


def _body(rec, config: CleaningConfig) -> tuple[bytes, bool, bool]:
    """(the record's payload up to the document limit, whether it is larger, whether its block was cut)."""
    cap = config.reader.max_document_bytes
    body = rec.content_stream().read(cap + 1)
    if len(body) > cap:
        return b"", True, _drain(rec)
    return body, False, _drain(rec)


def _drain(rec) -> bool:
    """Read the rest of the record's block; True when it ends before its Content-Length (a cut record)."""
    raw = rec.raw_stream
    while raw.read(1 << 16):
        pass
    left = getattr(raw, "limit", None)
    return left is None or left > 0
