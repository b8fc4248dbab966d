"""Output shards: zstd-compressed JSONL, one object per kept document."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass

import zstandard

from pipeline_project.cleaning.records import Document


@dataclass(frozen=True)
class Shard:
    name: str
    data: bytes
    docs: int
    raw_bytes: int


def shard_line(doc: Document) -> bytes:
    """One kept document as a shard's JSON line."""
    # the domain (cleaning profile) travels with the document to the token blocks and the training mixture
    record = {"id": doc.id, "text": doc.text, "source": doc.source, "domain": doc.meta.get("domain"), "meta": doc.meta}
    return (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")


def write_shards(docs: list[Document], max_shard_bytes: int = 64 * 1024 * 1024) -> list[Shard]:
    """Split by uncompressed size; a single document larger than the limit gets a shard of its own."""
    shards: list[Shard] = []
    lines: list[bytes] = []
    size = 0

    def flush():
        nonlocal lines, size
        raw = b"".join(lines)
        data = zstandard.ZstdCompressor(level=3).compress(raw)
        shards.append(Shard(name=f"shard-{len(shards):05d}.jsonl.zst", data=data, docs=len(lines), raw_bytes=len(raw)))
        lines, size = [], 0

    for doc in docs:
        line = shard_line(doc)
        if lines and size + len(line) > max_shard_bytes:
            flush()
        lines.append(line)
        size += len(line)
    if lines:
        flush()
    return shards


def read_shard(data: bytes) -> Iterator[dict]:
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
        for line in io.TextIOWrapper(reader, encoding="utf-8"):
            if line.strip():
                yield json.loads(line)
