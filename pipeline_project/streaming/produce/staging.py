"""Staging of a batch's block stream into messages and bounded chunks, outside any Kafka transaction.

The producer never holds a transaction open while the input is read or tokenized: `stage_chunks`
pulls blocks (which reads and tokenizes) until a chunk of at most `messages_per_chunk` encoded
messages is ready, and only then does the producer open a transaction for it. Chunk boundaries
fall on message boundaries, and every message except the stream's last holds exactly
`per_message` blocks, so the messages and chunks are a function of the block stream and the
config alone.

A retry of an interrupted batch skips the block prefix the ledger records as committed
(`skip_blocks`), checking that the re-read, re-tokenized prefix hashes to what was committed:
content that changed under the same fingerprint raises LedgerConflictError instead of producing
a mix of two versions. `StreamHasher` is the running xxh3-64 of the stream as little-endian
uint32 bytes, independent of how it is cut into arrays, messages or chunks.

Domains: the stream may carry `(domain, blocks)` pairs instead of bare arrays (`DomainBlocks`).
`rechunk` then groups each domain's blocks into messages of its own, so a message never mixes
domains, and emits a domain's message as soon as it is full; the short last messages follow in the
order the domains first appeared. A bare array is domain None, and a stream of bare arrays is cut
exactly as before. The prefix skip runs on the message stream (a committed prefix ends on a message
boundary), so the retry's messages are the uninterrupted run's whatever the domains' interleaving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Union

import numpy as np
import xxhash

from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project.streaming.kafka.format import TOKEN_DTYPE, Headers, count_padding, encode_message
from pipeline_project.streaming.kafka.spans import SpanRecorder

DomainBlocks = tuple[str | None, np.ndarray]
StreamItem = Union[np.ndarray, DomainBlocks]  # noqa: UP007 - a runtime alias


def split_item(item: StreamItem) -> DomainBlocks:
    """(domain, blocks) of a stream item; a bare array is domain None."""
    return (None, item) if isinstance(item, np.ndarray) else (item[0], item[1])


def read_while(items: Iterator[StreamItem], busy: Callable[[], bool], max_bytes: int) -> list[StreamItem]:
    """Items taken from `items` while `busy()` holds, up to `max_bytes` of blocks (at least one check of busy)."""
    ahead: list[StreamItem] = []
    size = 0
    while size < max_bytes and busy():
        item = next(items, None)
        if item is None:
            break
        ahead.append(item)
        size += split_item(item)[1].nbytes
    return ahead


def _same_kind(item: StreamItem, blocks: np.ndarray) -> StreamItem:
    return blocks if isinstance(item, np.ndarray) else (item[0], blocks)


class StreamHasher:
    def __init__(self) -> None:
        self._h = xxhash.xxh3_64()

    def update(self, blocks: np.ndarray | bytes) -> None:
        data = blocks if isinstance(blocks, bytes) else np.ascontiguousarray(blocks, dtype=TOKEN_DTYPE).data
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


@dataclass
class StagedMessage:
    value: bytes
    headers: Headers
    blocks: int
    pad_tokens: int
    padded_blocks: int
    domain: str | None = None


@dataclass
class Chunk:
    """Messages for one transaction; `last` when the stream ends with it; `stream_hash` of the stream up to it."""

    messages: list[StagedMessage]
    last: bool
    stream_hash: str

    @property
    def blocks(self) -> int:
        return sum(m.blocks for m in self.messages)

    @property
    def bytes(self) -> int:
        return sum(len(m.value) for m in self.messages)


def rechunk(blocks_iter: Iterable[StreamItem], per_message: int) -> Iterator[StreamItem]:
    """Regroup arbitrary (k, seq_len) arrays into messages of exactly `per_message` blocks (last may be short).

    With `(domain, blocks)` items, per domain: a message holds one domain's blocks; items come out as
    `(domain, message)` then, bare arrays as bare arrays.
    """
    pending: dict[str | None, list[np.ndarray]] = {}  # insertion order: the order domains first appeared
    have: dict[str | None, int] = {}
    tagged: dict[str | None, bool] = {}
    for item in blocks_iter:
        domain, blocks = split_item(item)
        if not len(blocks):
            continue
        tagged[domain] = not isinstance(item, np.ndarray)
        pending.setdefault(domain, []).append(blocks)
        have[domain] = have.get(domain, 0) + len(blocks)
        if have[domain] < per_message:
            continue
        parts = pending[domain]
        joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
        n_full = (have[domain] // per_message) * per_message
        for i in range(0, n_full, per_message):
            yield _tag(domain, joined[i : i + per_message], tagged[domain])
        rest = joined[n_full:]
        pending[domain], have[domain] = ([rest], len(rest)) if len(rest) else ([], 0)
    for domain, parts in pending.items():
        if have[domain]:
            yield _tag(domain, np.concatenate(parts) if len(parts) > 1 else parts[0], tagged[domain])


def _tag(domain: str | None, blocks: np.ndarray, tagged: bool) -> StreamItem:
    return (domain, blocks) if tagged else blocks


def skip_blocks(
    blocks_iter: Iterable[StreamItem],
    n: int,
    *,
    expected_hash: str,
    hasher: StreamHasher,
    where: str,
    on_skip: Callable[[str | None, int], None] | None = None,
) -> Iterator[StreamItem]:
    """The stream without its first `n` blocks, which must hash (into `hasher`) to `expected_hash`.

    Items are bare arrays or `(domain, blocks)` pairs (passed on as they came). `on_skip(domain, blocks)` hears of
    each skipped piece (the span recorder passes over them).

    The check runs before the first block after the prefix is handed on, so nothing is produced on a mismatch.
    """
    it = iter(blocks_iter)
    left, rest = n, None
    while left:
        item = next(it, None)
        if item is None:
            raise LedgerConflictError(
                f"{where}: an earlier attempt committed {n} blocks, but the input now yields only {n - left}; "
                "the content changed under the same content hash"
            )
        domain, blocks = split_item(item)
        skipped = min(len(blocks), left)
        if on_skip is not None:
            on_skip(domain, skipped)
        if len(blocks) <= left:
            hasher.update(blocks)
            left -= len(blocks)
        else:
            hasher.update(blocks[:left])
            rest, left = _same_kind(item, blocks[left:]), 0
    _check_prefix(hasher, expected_hash, n, where)
    if rest is not None:
        yield rest
    yield from it


def _check_prefix(hasher: StreamHasher, expected: str, n: int, where: str) -> None:
    if expected and hasher.hexdigest() != expected:
        raise LedgerConflictError(
            f"{where}: the first {n} blocks of the input hash to {hasher.hexdigest()}, but an earlier attempt "
            f"committed blocks hashing to {expected}; the content changed under the same content hash, and "
            "continuing would mix two versions in the topic"
        )


def stage_chunks(messages: Iterable[StreamItem], messages_per_chunk: int, encoder: MessageEncoder) -> Iterator[Chunk]:
    """Encode `messages` (block arrays, or (domain, blocks)) into chunks; looks one message ahead (not encoded) to mark the last one."""
    it = iter(messages)
    head = next(it, None)
    while head is not None:
        staged = [encoder(head)]
        while len(staged) < messages_per_chunk:
            message = next(it, None)
            if message is None:
                break
            staged.append(encoder(message))
        stream_hash = encoder.hasher.hexdigest()  # before the look-ahead message is encoded (and hashed)
        head = next(it, None)
        yield Chunk(staged, last=head is None, stream_hash=stream_hash)


class MessageEncoder:
    """Encodes one message's blocks, hashing them into `hasher` (callable for `stage_chunks`)."""

    def __init__(
        self,
        *,
        tokenizer_name: str,
        tokenizer_hash: str,
        source: str,
        seq_len: int,
        hasher: StreamHasher,
        spans: SpanRecorder | None = None,
        publication: str | None = None,
    ):
        self.spans = spans  # adds each message's `spans` header
        self.publication = publication  # the `pub` header: the content hash the spans' ordinals index
        self.tokenizer_name = tokenizer_name
        self.tokenizer_hash = tokenizer_hash
        self.source = source
        self.seq_len = seq_len
        self.hasher = hasher

    def __call__(self, message: StreamItem) -> StagedMessage:
        domain, blocks = split_item(message)
        if blocks.ndim != 2 or blocks.shape[1] != self.seq_len:
            raise ValueError(f"block of length {blocks.shape[-1]} given, expected seq_len {self.seq_len}")
        pad, padded_blocks = count_padding(blocks)
        value, headers = encode_message(
            blocks,
            tokenizer_name=self.tokenizer_name,
            tokenizer_hash=self.tokenizer_hash,
            source=self.source,
            pad_tokens=pad,
            domain=domain,
            publication=self.publication,
        )
        if self.spans is not None:
            headers.append(self.spans.header(domain, len(blocks)))
        self.hasher.update(value)
        return StagedMessage(value, headers, len(blocks), pad, padded_blocks, domain)
