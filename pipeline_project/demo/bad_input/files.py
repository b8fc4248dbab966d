"""The building blocks of the malformed-input classes: scales, files, and the bytes they are made of."""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import zstandard

from pipeline_project.demo.sample.corpus import prose_document

EXPECTED_NAME = "expected.json"
KEPT = "kept"


@dataclass(frozen=True)
class Scale:
    name: str
    long_line_bytes: int  # the one JSONL line over reader.max_line_bytes
    big_txt_bytes: int  # the .txt over reader.max_document_bytes
    tiny_docs: int  # documents in the many-tiny-documents file
    bomb_bytes: int  # what each decompression bomb inflates to (far past reader.max_decompressed_bytes)
    reader: dict = field(default_factory=dict)  # ReaderConfig fields this scale is read with


SCALES = {
    "small": Scale(
        name="small",
        long_line_bytes=200_000,
        big_txt_bytes=300_000,
        tiny_docs=5_000,
        bomb_bytes=64 << 20,
        reader={"max_line_bytes": 64 << 10, "max_document_bytes": 256 << 10, "max_decompressed_bytes": 8 << 20},
    ),
    "full": Scale(
        name="full",
        long_line_bytes=200_000_000,
        big_txt_bytes=(64 << 20) + (1 << 20),
        tiny_docs=1_000_000,
        bomb_bytes=8 << 30,
    ),
}


@dataclass
class BadFile:
    path: str  # relative to the output directory; becomes the S3 key under the demo's prefix
    chunks: Iterable[bytes]  # written in order, so big files are never whole in memory
    kept: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BadClass:
    name: str
    outcome: str  # "kept" or the one quarantine reason
    description: str
    make: Callable[[random.Random, Scale], list[BadFile]]


# ---- building blocks -----------------------------------------------------------------------------------


def prose(rng: random.Random, lang: str = "en") -> str:
    return prose_document(rng, lang, 3)


def line(text: str, **fields) -> bytes:
    return json.dumps({"text": text, **fields}, ensure_ascii=False).encode() + b"\n"


def good_lines(rng: random.Random, n: int = 2) -> bytes:
    return b"".join(line(prose(rng)) for _ in range(n))


def with_good(rng: random.Random, path: str, bad: list[bytes], reason: str) -> BadFile:
    """Good lines around the bad ones: only the bad lines are quarantined."""
    body = good_lines(rng, 1) + b"".join(line.rstrip(b"\n") + b"\n" for line in bad) + good_lines(rng, 1)
    return BadFile(path, [body], kept=2, quarantined={reason: len(bad)})


def one(path: str, data: bytes, outcome: str, kept: int | None = None) -> list[BadFile]:
    if outcome == KEPT:
        return [BadFile(path, [data], kept=1 if kept is None else kept)]
    return [BadFile(path, [data], quarantined={outcome: 1})]


def gzip_stream(total: int, chunk: int = 16 << 20) -> bytes:
    """A gzip member of `total` zero bytes, compressed chunk by chunk (never `total` bytes in memory)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * chunk
    out = [comp.compress(zeros) for _ in range(total // chunk)]
    return b"".join([*out, comp.compress(b"\0" * (total % chunk)), comp.flush()])


def gzip_bomb(total: int) -> bytes:
    member = gzip_stream(min(total, 1 << 30))  # members of up to 1 GiB, repeated: still one valid gzip file
    return member * max(1, total // (1 << 30))


def zstd_bomb(total: int) -> bytes:
    frame_size = min(total, 256 << 20)
    frame = zstandard.ZstdCompressor().compress(b"\0" * frame_size)
    return frame * max(1, total // frame_size)


def tiny_docs(n: int) -> Iterator[bytes]:
    for start in range(0, n, 50_000):
        yield b"".join(b'{"text": "tiny document number %d"}\n' % i for i in range(start, min(n, start + 50_000)))


def long_line(rng: random.Random, size: int) -> Iterator[bytes]:
    yield good_lines(rng, 1) + b'{"text": "'
    block = b"all work and no play makes a very long line " * 1000
    left = size
    while left > 0:
        yield block[:left]
        left -= len(block)
    yield b'"}\n' + good_lines(rng, 1)


def big_txt(rng: random.Random, size: int) -> Iterator[bytes]:
    block = (prose(rng) + "\n\n").encode()
    block = block * max(1, (1 << 20) // len(block))
    left = size
    while left > 0:
        yield block[:left]
        left -= len(block)


def parquet_file(texts: list[str]) -> bytes:
    """A Parquet file with FineWeb's columns (text, id, url), a row per text."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(texts)
    table = pa.table(
        {"text": texts, "id": [f"doc-{i}" for i in range(n)], "url": [f"https://e.com/{i}" for i in range(n)]}
    )
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=max(1, n // 2))
    return out.getvalue()


def wet_file(texts: list[str]) -> bytes:
    """A WET file (uncompressed): one `conversion` record per text, as Common Crawl writes them."""
    import io

    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=False)
    for i, text in enumerate(texts):
        headers = {
            "WARC-Record-ID": f"<urn:uuid:00000000-0000-4000-8000-{i:012d}>",
            "WARC-Date": "2024-01-01T00:00:00Z",
        }
        record = writer.create_warc_record(
            f"https://e.com/{i}",
            "conversion",
            payload=io.BytesIO(text.encode()),
            warc_content_type="text/plain",
            warc_headers_dict=headers,
        )
        writer.write_record(record)
    return out.getvalue()
