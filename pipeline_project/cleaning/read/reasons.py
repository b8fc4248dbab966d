"""The readers' quarantine reasons: one short machine string per way an input fails to become a document."""

from __future__ import annotations

REASONS = {
    "unsupported_format": "the key's suffix is not one of SUPPORTED_SUFFIXES (or an archive member's is not, or "
    "a zip member is encrypted or compressed with a method Python cannot read)",
    "html_extraction_disabled": "an .html / .htm object, or a WARC HTML response, while reader.extract_html is off",
    "html_extraction_failed": "trafilatura raised on the page",
    "object_too_large": "the object is larger than reader.max_decompressed_bytes",
    "corrupt_archive": "gzip / zstd / tar / zip data that cannot be read (members read before are kept)",
    "truncated_archive": "the archive ends before its end marker (complete JSONL lines, WARC records and archive "
    "members before the cut are kept)",
    "decompressed_too_large": "the archive inflates past its limit, checked while inflating: a .txt / .html / "
    "source one past reader.max_document_bytes, a JSONL / WARC / tar / zip one past reader.max_decompressed_bytes "
    "(or a Parquet row group declared larger than that)",
    "empty_object": "the object holds nothing but whitespace",
    "nul_bytes": "NUL bytes in text (a JSONL line, or a .txt / .html / source object)",
    "binary_content": "more control bytes than reader.max_control_byte_fraction: not text",
    "undecodable": "no text encoding fits (or a UTF-16/32 BOM with invalid data after it)",
    "document_too_large": "a .txt / .html / source document, a Parquet row's text or a WARC record's body larger "
    "than reader.max_document_bytes (checked while inflating and transcoding)",
    "line_too_long": "a line longer than reader.max_line_bytes",
    "bad_json_line": "a JSONL line that is not valid JSON",
    "json_too_deep": "a JSONL line nested deeper than the JSON parser's recursion limit",
    "not_an_object": "a JSONL line that is valid JSON but not an object",
    "missing_text_field": "a JSON object or Parquet row without reader.text_field (nor one of its fallbacks)",
    "text_not_string": "a JSON object or Parquet row whose text field is not a string (null, a number, ...)",
    "corrupt_parquet": "a Parquet file whose footer or a row group cannot be read (a cut file has no footer); "
    "the rows of the groups before are kept, the rest of the file is this one record",
    "corrupt_warc": "bytes that are not WARC, or a record header that cannot be parsed; the records before are "
    "kept, the rest of the file is this one record",
    "truncated_record": "a WARC / WET record whose block ends before its Content-Length (a cut file)",
    "warc_non_document": "a WARC / WET record that holds no document: warcinfo, request, metadata, revisit, or a "
    "response whose HTTP status is not 2xx",
    "warc_unsupported_payload": "a WARC response or resource whose Content-Type is neither HTML nor plain text",
    "not_a_regular_file": "an archive member that is a link, a device or a FIFO",
    "nested_archive": "an archive member that is itself a tar or zip archive (not opened)",
    "reader_error": "any other failure while reading (a bug to report; the detail names the exception)",
}
