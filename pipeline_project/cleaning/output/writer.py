"""Write one batch's shards and exclusion sink to S3 while it is being cleaned, in bounded memory.

Kept documents are appended to the current shard, which is uploaded once it holds `max_shard_bytes` of
JSONL; exclusion records are compressed into a temporary file that is uploaded at the end. So memory holds
one shard at most, whatever the batch's size.

Shards go under `<shard_dir><attempt>/`, a prefix of this attempt only: until the manifest that names them
is written, the batch's previously published shards stay as they were (a refused re-run leaves no trace).
`retract` takes documents back out of shards already uploaded (those another batch committed first).
With an `AttributeWriter`, every document's decision and signals go to `<shard prefix>attributes.parquet`,
uploaded with the exclusion sink (`attributes.py`).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass

import zstandard

from pipeline_project.cleaning.output.attributes import ATTRIBUTES_NAME, AttributeWriter, sha256
from pipeline_project.cleaning.output.shards import read_shard, shard_line
from pipeline_project.cleaning.records import Document


@dataclass(frozen=True)
class WrittenShard:
    key: str
    docs: int
    raw_bytes: int
    bytes: int
    sha256: str


class BatchWriter:
    def __init__(
        self,
        client,
        bucket: str,
        shard_prefix: str,
        exclusions_key: str,
        max_shard_bytes: int = 32 * 1024 * 1024,
        attributes: AttributeWriter | None = None,
    ):
        self.client = client
        self.bucket = bucket
        self.shard_prefix = shard_prefix
        self.exclusions_key = exclusions_key
        self.max_shard_bytes = max_shard_bytes
        self.shards: list[WrittenShard] = []
        self._lines: list[bytes] = []
        self._ids: list[str] = []
        self._size = 0
        self._shard_of: dict[str, int] = {}
        self._excluded = tempfile.TemporaryFile()  # noqa: SIM115 - lives until upload_exclusions or abort
        self._excluded_writer = zstandard.ZstdCompressor(level=3).stream_writer(self._excluded, closefd=False)
        self.excluded_records = 0
        self._excluded_uploaded = False
        self.attributes = attributes
        self.attributes_key = f"{shard_prefix}{ATTRIBUTES_NAME}"  # uploaded when `attributes` is set
        self.attributes_sha256 = ""
        self._late: dict[str, str] = {}
        self._copies: dict[str, tuple[int, int]] = {}

    # -- kept documents -------------------------------------------------------------------------------------
    def add_kept(self, docs: list[Document]) -> None:
        for doc in docs:
            line = shard_line(doc)
            if self._lines and self._size + len(line) > self.max_shard_bytes:
                self._flush_shard()
            self._lines.append(line)
            self._ids.append(doc.id)
            self._size += len(line)

    def _upload(self, index: int, raw: bytes, docs: int) -> WrittenShard:
        key = f"{self.shard_prefix}shard-{index:05d}.jsonl.zst"
        data = zstandard.ZstdCompressor(level=3).compress(raw)
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
        return WrittenShard(key, docs, len(raw), len(data), hashlib.sha256(data).hexdigest())

    def _flush_shard(self) -> None:
        if not self._lines:
            return
        index = len(self.shards)
        self.shards.append(self._upload(index, b"".join(self._lines), len(self._lines)))
        for doc_id in self._ids:
            self._shard_of[doc_id] = index
        self._lines, self._ids, self._size = [], [], 0

    def retract(self, doc_ids: set[str]) -> None:
        """Remove documents from the shards (already uploaded or still buffered)."""
        if not doc_ids:
            return
        keep = [(line, i) for line, i in zip(self._lines, self._ids) if i not in doc_ids]
        self._lines, self._ids = [line for line, _ in keep], [i for _, i in keep]
        self._size = sum(len(line) for line in self._lines)
        for index in sorted({self._shard_of[d] for d in doc_ids if d in self._shard_of}):
            shard = self.shards[index]
            data = self.client.get_object(Bucket=self.bucket, Key=shard.key)["Body"].read()
            records = [r for r in read_shard(data) if r["id"] not in doc_ids]
            raw = b"".join((json.dumps(r, ensure_ascii=False, default=str) + "\n").encode("utf-8") for r in records)
            self.shards[index] = self._upload(index, raw, len(records))

    # -- exclusions -------------------------------------------------------------------------------------------
    def add_excluded(self, records: list[dict]) -> None:
        for rec in records:
            self._excluded_writer.write((json.dumps(rec, ensure_ascii=False, default=str) + "\n").encode())
        self.excluded_records += len(records)

    # -- attributes -------------------------------------------------------------------------------------------
    def add_attributes(self, rows: list[dict]) -> None:
        if self.attributes is not None:
            self.attributes.add(rows)

    def set_outcome(self, late: dict[str, str], copies: dict[str, tuple[int, int]]) -> None:
        """What the index commit decided: late drops {doc_id: reason}, kept documents' copies {doc_id: (exact,
        near)}; written into the attribute rows at upload."""
        self._late, self._copies = dict(late), dict(copies)

    # -- end --------------------------------------------------------------------------------------------------
    def finish_shards(self) -> list[WrittenShard]:
        """Upload the last shard; returns every shard written (retract may still rewrite some)."""
        self._flush_shard()
        return list(self.shards)

    def upload_exclusions(self) -> None:
        """Upload the exclusion sink and the attribute file (both before the manifest that names them)."""
        if self.attributes is not None:
            data = self.attributes.finish(self._late, self._copies)
            self.client.put_object(Bucket=self.bucket, Key=self.attributes_key, Body=data)
            self.attributes_sha256 = sha256(data)
        self._excluded_writer.flush(zstandard.FLUSH_FRAME)
        self._excluded.seek(0)
        self._excluded_uploaded = True  # before the upload: one whose answer is lost may have landed
        self.client.upload_fileobj(self._excluded, self.bucket, self.exclusions_key)
        self._excluded.close()

    def abort(self) -> None:
        """Delete what this attempt uploaded (a refused or failed batch leaves no trace)."""
        for shard in self.shards:
            self.client.delete_object(Bucket=self.bucket, Key=shard.key)
        if self._excluded_uploaded:
            self.client.delete_object(Bucket=self.bucket, Key=self.exclusions_key)
        if self.attributes_sha256:
            self.client.delete_object(Bucket=self.bucket, Key=self.attributes_key)
        if self.attributes is not None:
            self.attributes.close()
        self._excluded.close()
