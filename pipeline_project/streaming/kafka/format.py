"""Wire format of token blocks on Kafka.

Value: little-endian uint32 token ids, `blocks` whole blocks of exactly `seq_len` tokens each.
Headers (all bytes, UTF-8 text): fmt (format version), tok and tok_hash (tokenizer name and hash),
seq_len, blocks (block count), src (source shard id), and optionally domain (the cleaning profile of
every block in the message: a message never mixes domains; absent on messages of unlabelled data) and pub (the
publication the message's document ordinals index: the content hash of the batch's shard manifest that was
produced, `ShardManifest.content_hash`; absent on messages produced before it was written, which resolve against
the batch's current manifest). A message that breaks any of this raises MalformedMessageError when decoded.

Padding: the token id `PAD_TOKEN` (0xFFFFFFFF, never a real token id) fills the end of a batch's
last, partial block, so the partial tail of a batch is delivered instead of dropped. A message that
holds padding is written as format version 2 with a `pad` header (its number of pad tokens);
readers that only know version 1 reject it rather than train on the sentinel. Messages without
padding stay version 1, byte for byte as before. Readers map the sentinel to -1 (loader) and the
train loop masks those positions out of inputs and labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from pipeline_project.streaming.errors import MalformedMessageError

FORMAT_VERSION = 2  # the newest version: written for messages with padding
PLAIN_FORMAT_VERSION = 1  # written for messages without padding
FORMAT_VERSIONS = (PLAIN_FORMAT_VERSION, FORMAT_VERSION)
PAD_TOKEN = 0xFFFF_FFFF  # fills a padded tail block; never a token id (vocabularies are far smaller)
TOKEN_DTYPE = np.dtype("<u4")
TOKEN_BYTES = TOKEN_DTYPE.itemsize
DEFAULT_SEQ_LEN = 256  # tokens per block: the topic's (`PipelineLayout.seq_len`) and the trainer's (`TrainConfig`)
DEFAULT_MESSAGE_BYTES = 128 * 1024
"""Target Kafka message size (`PipelineLayout.message_bytes`, `ProducerConfig.max_message_bytes`): small enough that
a batch spreads over all partitions (and so over all loader ranks), large enough that per-message overhead stays
negligible, and well under the brokers' 1 MiB `message.max.bytes`."""

H_FORMAT = "fmt"
H_TOKENIZER = "tok"
H_TOKENIZER_HASH = "tok_hash"
H_SEQ_LEN = "seq_len"
H_BLOCKS = "blocks"
H_SOURCE = "src"
H_PAD = "pad"  # version 2: pad tokens in the message
H_DOMAIN = "domain"  # optional, any version: the domain of all the message's blocks (readers ignore what they lack)
H_PUBLICATION = "pub"  # optional, any version: the content hash of the publication the `spans` ordinals index
REQUIRED_HEADERS = (H_FORMAT, H_TOKENIZER, H_TOKENIZER_HASH, H_SEQ_LEN, H_BLOCKS, H_SOURCE)

Headers = list[tuple[str, bytes]]


@dataclass(frozen=True)
class BlockHeader:
    format_version: int
    tokenizer_name: str
    tokenizer_hash: str
    seq_len: int
    blocks: int
    source: str
    pad_tokens: int = 0
    domain: str | None = None  # None: the message carries no domain header
    publication: str | None = None  # None: no publication header (produced before it was written)


def count_padding(blocks: np.ndarray) -> tuple[int, int]:
    """(pad tokens, blocks holding padding) of an (n, seq_len) uint32 array, vectorized."""
    mask = blocks == PAD_TOKEN
    pad = int(np.count_nonzero(mask))
    return pad, (int(np.count_nonzero(mask.any(axis=1))) if pad else 0)


def max_blocks_per_message(seq_len: int, max_bytes: int = DEFAULT_MESSAGE_BYTES) -> int:
    """How many whole blocks fit in a value of at most `max_bytes`."""
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    block_bytes = seq_len * TOKEN_BYTES
    if block_bytes > max_bytes:
        raise ValueError(
            f"one block of seq_len {seq_len} is {block_bytes} bytes, over the {max_bytes}-byte message limit"
        )
    return max_bytes // block_bytes


def encode_message(
    blocks: np.ndarray,
    *,
    tokenizer_name: str,
    tokenizer_hash: str,
    source: str,
    pad_tokens: int | None = None,
    domain: str | None = None,
    publication: str | None = None,
) -> tuple[bytes, Headers]:
    """Serialize an (n, seq_len) uint32 array into a Kafka value and headers.

    `pad_tokens` is the number of `PAD_TOKEN`s in `blocks` (counted here when not given); with any, the message
    is written as format version 2 with a `pad` header, else as version 1. A `domain` adds the `domain` header, a
    `publication` (the produced manifest's content hash) the `pub` header.
    """
    if blocks.ndim != 2 or blocks.shape[0] < 1 or blocks.shape[1] < 1:
        raise ValueError(f"blocks must be a non-empty 2-D (n, seq_len) array, got shape {blocks.shape}")
    if blocks.dtype.kind != "u" or blocks.dtype.itemsize != TOKEN_BYTES:
        raise ValueError(f"blocks must be uint32, got {blocks.dtype}")
    n, seq_len = blocks.shape
    if pad_tokens is None:
        pad_tokens, _ = count_padding(blocks)
    if not 0 <= pad_tokens < n * seq_len:
        raise ValueError(f"{pad_tokens} pad tokens in a message of {n} x {seq_len} tokens")
    value = np.ascontiguousarray(blocks, dtype=TOKEN_DTYPE).tobytes()
    version = FORMAT_VERSION if pad_tokens else PLAIN_FORMAT_VERSION
    headers: Headers = [
        (H_FORMAT, str(version).encode()),
        (H_TOKENIZER, tokenizer_name.encode()),
        (H_TOKENIZER_HASH, tokenizer_hash.encode()),
        (H_SEQ_LEN, str(seq_len).encode()),
        (H_BLOCKS, str(n).encode()),
        (H_SOURCE, source.encode()),
    ]
    if pad_tokens:
        headers.append((H_PAD, str(pad_tokens).encode()))
    if domain is not None:
        headers.append((H_DOMAIN, domain.encode()))
    if publication is not None:
        if not publication:
            raise ValueError("an empty publication header names nothing")
        headers.append((H_PUBLICATION, publication.encode()))
    return value, headers


def read_header(
    headers: Iterable[tuple[str, bytes | None]] | None, *, topic: str, partition: int, offset: int
) -> BlockHeader:
    """Parse and validate the headers of one message (no payload check)."""

    def bad(problem: str) -> MalformedMessageError:
        return MalformedMessageError(topic, partition, offset, problem)

    found: dict[str, bytes] = {}
    for key, val in headers or ():
        if val is not None:
            found[key] = val
    missing = [h for h in REQUIRED_HEADERS if h not in found]
    if missing:
        raise bad(f"missing headers {missing}")
    try:
        text = {k: found[k].decode() for k in REQUIRED_HEADERS}
        version = int(text[H_FORMAT])
        seq_len = int(text[H_SEQ_LEN])
        n_blocks = int(text[H_BLOCKS])
        pad = int(found[H_PAD].decode()) if H_PAD in found else 0
        domain = found[H_DOMAIN].decode() if H_DOMAIN in found else None
        publication = found[H_PUBLICATION].decode() if H_PUBLICATION in found else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"unparseable header: {exc}") from None
    if version not in FORMAT_VERSIONS:
        raise bad(f"unknown format version {version} (this reader knows {', '.join(map(str, FORMAT_VERSIONS))})")
    if seq_len <= 0 or n_blocks <= 0:
        raise bad(f"non-positive seq_len {seq_len} or blocks {n_blocks}")
    if pad and version == PLAIN_FORMAT_VERSION:
        raise bad(f"format version {version} cannot hold padding, the pad header says {pad}")
    if not 0 <= pad < n_blocks * seq_len:
        raise bad(f"pad header {pad} outside [0, {n_blocks * seq_len})")
    if publication is not None and not publication:
        raise bad("empty publication header")
    return BlockHeader(
        version, text[H_TOKENIZER], text[H_TOKENIZER_HASH], seq_len, n_blocks, text[H_SOURCE], pad, domain, publication
    )


def decode_message(
    value: bytes | memoryview | None,
    headers: Iterable[tuple[str, bytes | None]] | None,
    *,
    topic: str,
    partition: int,
    offset: int,
    expected_seq_len: int | None = None,
    expected_tokenizer_hash: str | None = None,
) -> np.ndarray:
    """Return the message's blocks as a read-only (n, seq_len) uint32 view of `value` (zero copy)."""
    return decode_blocks(
        value,
        headers,
        topic=topic,
        partition=partition,
        offset=offset,
        expected_seq_len=expected_seq_len,
        expected_tokenizer_hash=expected_tokenizer_hash,
    )[1]


def decode_blocks(
    value: bytes | memoryview | None,
    headers: Iterable[tuple[str, bytes | None]] | None,
    *,
    topic: str,
    partition: int,
    offset: int,
    expected_seq_len: int | None = None,
    expected_tokenizer_hash: str | None = None,
) -> tuple[BlockHeader, np.ndarray]:
    """`decode_message`, also returning the parsed header (its `pad_tokens` says whether to map padding)."""
    header = read_header(headers, topic=topic, partition=partition, offset=offset)

    def bad(problem: str) -> MalformedMessageError:
        return MalformedMessageError(topic, partition, offset, problem)

    if expected_tokenizer_hash is not None and header.tokenizer_hash != expected_tokenizer_hash:
        raise bad(
            f"tokenizer hash {header.tokenizer_hash} ({header.tokenizer_name}) != expected {expected_tokenizer_hash}"
        )
    if expected_seq_len is not None and header.seq_len != expected_seq_len:
        raise bad(f"seq_len {header.seq_len} != expected {expected_seq_len}")
    if value is None:
        raise bad("empty value (tombstone)")
    want = header.blocks * header.seq_len * TOKEN_BYTES
    if len(value) != want:
        raise bad(
            f"value is {len(value)} bytes, expected {want} ({header.blocks} blocks x {header.seq_len} tokens x 4)"
        )
    return header, np.frombuffer(value, dtype=TOKEN_DTYPE).reshape(header.blocks, header.seq_len)
