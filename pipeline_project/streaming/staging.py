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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import xxhash

from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project.streaming.format import TOKEN_DTYPE, Headers, count_padding, encode_message


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


def rechunk(blocks_iter: Iterable[np.ndarray], per_message: int) -> Iterator[np.ndarray]:
    """Regroup arbitrary (k, seq_len) arrays into messages of exactly `per_message` blocks (last may be short)."""
    pending: list[np.ndarray] = []
    have = 0
    for blocks in blocks_iter:
        if not len(blocks):
            continue
        pending.append(blocks)
        have += len(blocks)
        if have < per_message:
            continue
        joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
        n_full = (have // per_message) * per_message
        for i in range(0, n_full, per_message):
            yield joined[i : i + per_message]
        rest = joined[n_full:]
        pending, have = ([rest], len(rest)) if len(rest) else ([], 0)
    if have:
        yield np.concatenate(pending) if len(pending) > 1 else pending[0]


def skip_blocks(
    blocks_iter: Iterable[np.ndarray], n: int, *, expected_hash: str, hasher: StreamHasher, where: str
) -> Iterator[np.ndarray]:
    """The stream without its first `n` blocks, which must hash (into `hasher`) to `expected_hash`.

    The check runs before the first block after the prefix is handed on, so nothing is produced on a mismatch.
    """
    it = iter(blocks_iter)
    left, rest = n, None
    while left:
        blocks = next(it, None)
        if blocks is None:
            raise LedgerConflictError(
                f"{where}: an earlier attempt committed {n} blocks, but the input now yields only {n - left}; "
                "the content changed under the same content hash"
            )
        if len(blocks) <= left:
            hasher.update(blocks)
            left -= len(blocks)
        else:
            hasher.update(blocks[:left])
            rest, left = blocks[left:], 0
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


def stage_chunks(messages: Iterable[np.ndarray], messages_per_chunk: int, encoder: MessageEncoder) -> Iterator[Chunk]:
    """Encode `messages` (block arrays) into chunks; looks one message ahead (not encoded) to mark the last one."""
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

    def __init__(self, *, tokenizer_name: str, tokenizer_hash: str, source: str, seq_len: int, hasher: StreamHasher):
        self.tokenizer_name = tokenizer_name
        self.tokenizer_hash = tokenizer_hash
        self.source = source
        self.seq_len = seq_len
        self.hasher = hasher

    def __call__(self, blocks: np.ndarray) -> StagedMessage:
        if blocks.ndim != 2 or blocks.shape[1] != self.seq_len:
            raise ValueError(f"block of length {blocks.shape[-1]} given, expected seq_len {self.seq_len}")
        pad, padded_blocks = count_padding(blocks)
        value, headers = encode_message(
            blocks,
            tokenizer_name=self.tokenizer_name,
            tokenizer_hash=self.tokenizer_hash,
            source=self.source,
            pad_tokens=pad,
        )
        self.hasher.update(value)
        return StagedMessage(value, headers, len(blocks), pad, padded_blocks)
