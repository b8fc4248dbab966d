"""Which documents a token block holds: per-message span records, written into a `spans` header at produce time.

A batch's documents are numbered in the order the producer reads them (the ordinal: for a published batch,
the position in `publish.iter_shard_documents`, so shard by shard, line by line). Each domain's documents are
packed back to back, each followed by one EOS (`packing`); a message holds consecutive blocks of one domain.
Its `spans` header lists, in order, the pieces of documents in the message's tokens (all its blocks, flattened):

    (ordinal, first token of the document in this message, token count, FIM)

where a document's tokens are its (FIM-arranged, when FIM chose it) token ids plus the EOS after it. Padding at
the end of a batch's last block belongs to no span. Encoding: per span three unsigned LEB128 varints,
`(ordinal delta) * 2 + fim`, `first`, `count` (the delta is from the previous span's ordinal; the first span's
from 0), behind a one-byte tag: 1 plain; 2 the same zstd-compressed, used when plain is over `MAX_HEADER_BYTES`;
0 not recorded, when even that is over (a message of thousands of tiny documents). A typical span costs 3-5 bytes.
A document that rehydration repeats (`cleaning.rehydration`) is packed several times in a row: each copy is a
span of its own with the same ordinal (an ordinal delta of 0), so every copy traces to the one document.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import zstandard

H_SPANS = "spans"
MAX_HEADER_BYTES = 8192  # the topic leaves message_bytes // 128 + 16 KiB for headers (`topics.message_bytes_needed`)
# A compressed header inflates to at most this: a message holds at most ~2^18 tokens (1 MiB of uint32), each span
# at least two (a token and its EOS), a span at most 15 bytes (three 5-byte varints); 4 MiB covers it
MAX_BODY_BYTES = 4 << 20
TAG_OMITTED, TAG_PLAIN, TAG_ZSTD = 0, 1, 2


@dataclass(frozen=True)
class Span:
    ordinal: int  # the document's position in the batch
    first: int  # its first token in this message, counted in the document's tokens (EOS included)
    count: int  # tokens of the document in this message
    fim: bool  # FIM rearranged the document


class SpansNotRecorded(ValueError):
    """A message without span records: produced before spans, or with more documents than the header holds."""


def _varint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_spans(spans: Sequence[Span]) -> bytes:
    body = bytearray()
    previous = 0
    for s in spans:
        _varint((s.ordinal - previous) * 2 + int(s.fim), body)
        _varint(s.first, body)
        _varint(s.count, body)
        previous = s.ordinal
    if len(body) + 1 <= MAX_HEADER_BYTES:
        return bytes([TAG_PLAIN]) + bytes(body)
    packed = zstandard.ZstdCompressor(level=3).compress(bytes(body))
    if len(packed) + 1 <= MAX_HEADER_BYTES:
        return bytes([TAG_ZSTD]) + packed
    return bytes([TAG_OMITTED])


def _inflate(packed: bytes) -> bytes:
    """The zstd body, read through a bounded stream: a header that declares (or inflates to) more than
    `MAX_BODY_BYTES` is refused before more than that is held."""
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(packed)) as reader:
        body = reader.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"spans header inflates past {MAX_BODY_BYTES} bytes: not one the producer writes")
    return body


def _varints(body: bytes) -> np.ndarray:
    """Every unsigned LEB128 varint of `body`, decoded at once (no per-byte Python)."""
    b = np.frombuffer(body, dtype=np.uint8)
    if b.size == 0:
        return np.zeros(0, dtype=np.uint64)
    ends = np.flatnonzero(b < 0x80)
    if ends.size == 0 or ends[-1] != b.size - 1:
        raise ValueError("truncated spans header")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > 9:
        raise ValueError("spans header holds a varint over 63 bits")
    shifts = (np.arange(b.size) - np.repeat(starts, lengths)).astype(np.uint64) * np.uint64(7)
    return np.add.reduceat((b & 0x7F).astype(np.uint64) << shifts, starts)


def decode_spans(value: bytes | None) -> list[Span]:
    if not value or value[0] == TAG_OMITTED:
        raise SpansNotRecorded("the message carries no span records (produced before spans, or over the budget)")
    if value[0] not in (TAG_PLAIN, TAG_ZSTD):
        raise ValueError(f"unknown spans header tag {value[0]}")
    body = value[1:] if value[0] == TAG_PLAIN else _inflate(value[1:])
    numbers = _varints(body).tolist()
    if len(numbers) % 3:
        raise ValueError("truncated spans header")
    spans, ordinal = [], 0
    for i in range(0, len(numbers), 3):
        ordinal += numbers[i] >> 1
        spans.append(Span(ordinal, numbers[i + 1], numbers[i + 2], bool(numbers[i] & 1)))
    return spans


def spans_of_block(spans: Sequence[Span], seq_len: int, block: int) -> list[tuple[int, Span]]:
    """The pieces of block `block` of a message: (offset in the block, span cut to the block), in order."""
    lo, hi = block * seq_len, (block + 1) * seq_len
    out, at = [], 0
    for s in spans:
        a, b = max(at, lo), min(at + s.count, hi)
        if a < b:
            out.append((a - lo, Span(s.ordinal, s.first + a - at, b - a, s.fim)))
        at += s.count
        if at >= hi:
            break
    return out


class SpanRecorder:
    """Notes each document's domain and token count as it is packed; `take(domain, n)` gives the spans of the
    domain's next `n` blocks (the message being encoded), `skip(domain, n)` passes over blocks an earlier attempt
    committed. Memory: the documents not yet wholly encoded."""

    def __init__(self, seq_len: int):
        self.seq_len = seq_len
        self.ordinal = 0
        self._domains: dict[str | None, deque[list]] = {}  # domain -> [ordinal, start, end, fim] ahead
        self._noted: dict[str | None, int] = {}
        self._position: dict[str | None, int] = {}

    def note(
        self,
        ids: Sequence[np.ndarray],
        domains: Sequence[str | None],
        fim: Sequence[bool] | None,
        repeats: Sequence[int] | None = None,
    ) -> None:
        """A batch of documents as the packer gets them (empty ones take an ordinal and no tokens); a document
        packed `repeats[i]` times in a row (rehydration) gets that many spans with its one ordinal."""
        for i, (doc, domain) in enumerate(zip(ids, domains, strict=True)):
            for _ in range(max(1, int(repeats[i])) if repeats is not None and len(doc) else 1):
                if len(doc):
                    start = self._noted.get(domain, 0)
                    end = start + len(doc) + 1  # the EOS after it
                    self._domains.setdefault(domain, deque()).append((self.ordinal, start, end, bool(fim and fim[i])))
                    self._noted[domain] = end
            self.ordinal += 1

    def take(self, domain: str | None, blocks: int) -> list[Span]:
        lo = self._position.get(domain, 0)
        hi = lo + blocks * self.seq_len
        docs = self._domains.get(domain, deque())
        spans = []
        for ordinal, start, end, fim in docs:
            if start >= hi:
                break
            a, b = max(start, lo), min(end, hi)
            if a < b:
                spans.append(Span(ordinal, a - start, b - a, fim))
        while docs and docs[0][2] <= hi:
            docs.popleft()
        self._position[domain] = hi
        return spans

    def header(self, domain: str | None, blocks: int) -> tuple[str, bytes]:
        return H_SPANS, encode_spans(self.take(domain, blocks))

    def skip(self, domain: str | None, blocks: int) -> None:
        self.take(domain, blocks)
