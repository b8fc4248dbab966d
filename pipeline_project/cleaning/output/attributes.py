"""Per-document attributes: every document's decision and quality signals, as one Parquet file per batch.

Like RedPajama-V2's quality signals and Dolma's attributes: one row per document of the batch, kept, dropped
and quarantined, beside the batch's shards (`<shard prefix>attributes.parquet`, named with its sha256 in the
manifest). Columns:

    doc_id, source, record    the document, the S3 object it was read from and its record in it (line/member)
    domain, lang               the cleaning profile and the language the steps judged it in
    decision, step, reason     kept | dropped | quarantined; the step and the full reason that removed it
    dup_of, dup_kind           for a duplicate: "<batch>/<doc>" it is a copy of, and exact | near
    copies_exact, copies_near  for a kept document: copies of it seen so far (this batch and earlier ones; later
                               batches add to the count in the dedup index, `dedup_copies`)
    <step>.<signal>            each filter's signals (`steps/signals.py`); null where the step never computed it

The file's key-value metadata holds the cleaning config (JSON), so a retune knows what the rows were decided
with. Rows are written chunk by chunk (one row group each) to a temporary file, so memory holds one chunk.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.records import Document, Dropped, Quarantined

ATTRIBUTES_NAME = "attributes.parquet"
CONFIG_KEY = b"pipeline_project.cleaning_config"
DUP_STEPS = ("exact_dedup", "minhash_dedup", "index_commit")
BASE_FIELDS = [
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("record", pa.string()),
    ("domain", pa.string()),
    ("lang", pa.string()),
    ("decision", pa.string()),
    ("step", pa.string()),
    ("reason", pa.string()),
    ("dup_of", pa.string()),
    ("dup_kind", pa.string()),
    ("copies_exact", pa.int64()),
    ("copies_near", pa.int64()),
]


def signal_columns(chains: dict[str, list]) -> list[str]:
    """Every signal any step of the chains can record ("<step>.<name>"), in a fixed order."""
    names: dict[str, None] = {}
    for chain in chains.values():
        for step in chain:
            for name in getattr(step, "signal_names", lambda: ())():
                names[f"{step.name}.{name}"] = None
    return sorted(names)


def schema(config: CleaningConfig, columns: list[str]) -> pa.Schema:
    fields = [pa.field(n, t) for n, t in BASE_FIELDS] + [pa.field(c, pa.float64()) for c in columns]
    return pa.schema(fields, metadata={CONFIG_KEY: config.model_dump_json().encode()})


def duplicate_of(reason: str) -> tuple[str, str] | None:
    """("<batch>/<doc>", "exact" | "near") of a duplicate's reason, else None."""
    kind, sep, target = reason.partition("_duplicate_of:")
    return (target, kind) if sep and kind in ("exact", "near") else None


def _record(doc_id: str, source: str) -> str:
    return doc_id[len(source) :].lstrip(":#/") if source and doc_id.startswith(source) else doc_id


def _row(doc_id: str, source: str, meta: dict, signals: dict | None, decision: str, step: str, reason: str) -> dict:
    dup = duplicate_of(reason) if step in DUP_STEPS else None
    row = {
        "doc_id": doc_id,
        "source": source,
        "record": _record(doc_id, source),
        "domain": meta.get("domain"),
        "lang": meta.get("lang"),
        "decision": decision,
        "step": step or None,
        "reason": reason or None,
        "dup_of": dup[0] if dup else None,
        "dup_kind": dup[1] if dup else None,
    }
    for key, value in (signals or {}).items():
        row[key] = None if value is None else float(value)
    return row


def rows_of(kept: Iterable[Document], dropped: Iterable[Dropped], quarantined: Iterable[Quarantined]) -> list[dict]:
    rows = [_row(d.id, d.source, d.meta, d.state.signals, "kept", "", "") for d in kept]
    rows += [_row(d.id, d.source, d.meta, d.signals, "dropped", d.step, d.reason) for d in dropped]
    rows += [_row(q.id, q.source, {}, None, "quarantined", "read", q.reason) for q in quarantined]
    return rows


class AttributeWriter:
    """Collects a batch's attribute rows in a temporary Parquet file; `finish` patches decisions that changed
    after a chunk was written (late index drops) and the copy counts, then uploads the file."""

    def __init__(self, config: CleaningConfig, columns: list[str]):
        self.schema = schema(config, columns)
        self._names = set(self.schema.names)
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - lives until finish or close
        self._writer = pq.ParquetWriter(self._file, self.schema, compression="zstd")
        self.rows = 0

    def add(self, rows: list[dict]) -> None:
        if not rows:
            return
        unknown = {k for r in rows for k in r} - self._names
        if unknown:
            raise ValueError(f"attribute columns not in the schema: {sorted(unknown)}")
        self._writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
        self.rows += len(rows)

    def finish(self, late: dict[str, str], copies: dict[str, tuple[int, int]]) -> bytes:
        """The file's bytes: `late` {doc_id: reason} become dropped at index_commit, `copies` {doc_id: (exact,
        near)} fill the kept documents' copy counts."""
        self._writer.close()
        self._file.seek(0)
        source = pq.ParquetFile(self._file)
        out = pa.BufferOutputStream()
        with pq.ParquetWriter(out, self.schema, compression="zstd") as writer:
            for i in range(source.num_row_groups):
                writer.write_table(_patch(source.read_row_group(i).to_pylist(), late, copies, self.schema))
        self._file.close()
        return out.getvalue().to_pybytes()

    def close(self) -> None:
        if not self._file.closed:
            self._writer.close()
            self._file.close()


def _patch(rows: list[dict], late: dict[str, str], copies: dict[str, tuple[int, int]], sch: pa.Schema) -> pa.Table:
    for r in rows:
        if r["decision"] != "kept":
            continue
        reason = late.get(r["doc_id"])
        if reason is not None:
            dup = duplicate_of(reason)
            r.update(decision="dropped", step="index_commit", reason=reason)
            r.update(dup_of=dup[0] if dup else None, dup_kind=dup[1] if dup else None)
        else:
            r["copies_exact"], r["copies_near"] = copies.get(r["doc_id"], (0, 0))
    return pa.Table.from_pylist(rows, schema=sch)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_attributes(data: bytes) -> tuple[pa.Table, CleaningConfig]:
    """The attribute table and the cleaning config its rows were decided with."""
    table = pq.read_table(pa.BufferReader(data))
    raw = (table.schema.metadata or {}).get(CONFIG_KEY)
    if raw is None:
        raise ValueError("attribute file without its cleaning config (not written by this pipeline)")
    return table, CleaningConfig.model_validate(json.loads(raw))
