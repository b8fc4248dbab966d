"""Parquet: one document per row, read a row group at a time (pyarrow).

The text is the column `reader.text_field` (or its first fallback the file has: FineWeb's `text`, The Stack's
`content`); the other columns, or only `reader.meta_fields`, go to meta["fields"] as a JSONL line's fields do
(`formats.object_record`, the one route for both). Only those columns are read. Each row is accounted for like a
JSONL line: a document `key#n` (n counts rows from 1) or a quarantine record, `missing_text_field` when the file
has no text column, `text_not_string` for a null or non-string text, `document_too_large` past
`reader.max_document_bytes`.

The footer indexes the file, so the object is copied to a seekable spool first (`streams.spool`; memory holds at
most SPOOL_IN_MEMORY of it, then one row group). A file whose footer cannot be read (a cut file) is one
`corrupt_parquet` record; a row group that cannot be read, or whose declared size is past
`reader.max_decompressed_bytes`, ends the file: the rows before are kept, the rest is one record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.read.formats import exc_detail, object_record, text_field_of
from pipeline_project.cleaning.read.streams import spool
from pipeline_project.cleaning.records import Document, Quarantined


def read_parquet(
    key: str, pieces: Iterable[bytes], outcome: list[tuple[str, str]], config: CleaningConfig
) -> Iterator[Document | Quarantined]:
    """The records of one Parquet object given as `pieces` (`outcome`: where the pieces failed, if they did)."""
    import pyarrow.parquet as pq

    with spool(pieces) as f:
        if outcome:
            yield Quarantined(key, key, *outcome[0])
            return
        try:
            pf = pq.ParquetFile(f)
        except Exception as exc:  # noqa: BLE001 - ArrowInvalid, OSError...: the file cannot be opened
            yield Quarantined(key, key, "corrupt_parquet", exc_detail(exc, config))
            return
        yield from _rows(key, pf, config)


def _columns(names: list[str], config: CleaningConfig) -> list[str]:
    cfg = config.reader
    text = text_field_of(names, cfg)
    return [n for n in names if n == text or cfg.meta_fields is None or n in cfg.meta_fields]


def _rows(key: str, pf, config: CleaningConfig) -> Iterator[Document | Quarantined]:
    cfg = config.reader
    columns = _columns(pf.schema_arrow.names, config)
    groups, row = pf.num_row_groups, 0
    for g in range(groups):
        declared = pf.metadata.row_group(g).total_byte_size
        where = f"row group {g + 1} of {groups} (rows from {row + 1})"
        if declared > cfg.max_decompressed_bytes:
            yield Quarantined(key, key, "decompressed_too_large", f"{where}: {declared} bytes declared")
            return
        try:
            rows = pf.read_row_group(g, columns=columns).to_pylist()
        except Exception as exc:  # noqa: BLE001 - a corrupt page: the rows before are kept
            yield Quarantined(key, key, "corrupt_parquet", f"{where}: " + exc_detail(exc, config))
            return
        for obj in rows:
            row += 1
            doc_id = f"{key}#{row}"
            text = obj.get(text_field_of(obj, cfg) or "")
            if isinstance(text, str) and len(text) > cfg.max_document_bytes:
                yield Quarantined(doc_id, key, "document_too_large", f"{len(text)} characters")
            else:
                yield object_record(doc_id, key, obj, config, "utf-8")
        del rows
