"""A recorded segment of a token-block topic, and its replay through the loader's own decode-and-batch code.

A GPU machine may have no Java, so no broker. `gpu_bench.py record` writes the raw message values, headers
and (partition, offset) of a topic segment to one file; `replay_batches` feeds them to the loader's
`PartitionReader` (which decodes each message with `format.decode_blocks`) through `ReplayConsumer`, a stand-in
for the confluent-kafka consumer, and to the loader's `BatchAssembler` (interleave, copy into int64 rows,
padding -> -1, state snapshot per batch). Nothing of the decode path is reimplemented here.

What the replay does not include: librdkafka's fetch and decompression, which run in librdkafka's own threads,
off the GIL. `ReplayMessage.value()` copies the value on every call, as confluent-kafka's `Message.value()` does.

File format (little-endian): b"TOPICSEG1\\n", u32 meta length, meta JSON (topic, seq_len, vocab_size, tokenizer,
end_offsets, ...), then per record: u32 partition, u64 offset, u16 header count, per header (u16 key length,
key, i32 value length or -1 for None, value), u32 value length, value.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from pipeline_project.streaming.load.assembler import Batch, BatchAssembler
from pipeline_project.streaming.load.assignment import partitions_for_rank
from pipeline_project.streaming.load.config import LoaderConfig
from pipeline_project.streaming.load.partition_reader import PartitionReader
from pipeline_project.streaming.load.state import Cursor, Interleaver, make_state

MAGIC = b"TOPICSEG1\n"
_U32 = struct.Struct("<I")
_REC = struct.Struct("<IQH")  # partition, offset, header count
_KEY = struct.Struct("<H")
_VAL = struct.Struct("<i")

Headers = list[tuple[str, bytes | None]]


@dataclass
class Record:
    partition: int
    offset: int
    value: bytes | memoryview | None
    headers: Headers


@dataclass
class Recording:
    meta: dict[str, Any]
    records: list[Record] = field(default_factory=list)

    @property
    def seq_len(self) -> int:
        return int(self.meta["seq_len"])

    def partitions(self) -> list[int]:
        return sorted({r.partition for r in self.records})

    def end_offsets(self) -> dict[int, int]:
        """Per partition, the offset after its last recorded message (bounded mode stops there)."""
        ends: dict[int, int] = {}
        for r in self.records:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        return ends

    def value_bytes(self) -> int:
        return sum(len(r.value or b"") for r in self.records)


def write_recording(path: str | Path, meta: Mapping[str, Any], records: Iterable[Record]) -> int:
    """Write `records` (in offset order per partition) to `path`; returns the file size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as f:
        blob = json.dumps(dict(meta), sort_keys=True).encode()
        f.write(MAGIC + _U32.pack(len(blob)) + blob)
        for r in records:
            f.write(_REC.pack(r.partition, r.offset, len(r.headers)))
            for key, val in r.headers:
                k = key.encode()
                f.write(_KEY.pack(len(k)) + k)
                f.write(_VAL.pack(-1) if val is None else _VAL.pack(len(val)) + bytes(val))
            value = b"" if r.value is None else bytes(r.value)
            f.write(_U32.pack(len(value)) + value)
    tmp.replace(path)
    return path.stat().st_size


def read_recording(path: str | Path) -> Recording:
    """Load a recording; values are zero-copy memoryviews into the file's bytes."""
    data = memoryview(Path(path).read_bytes())
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise ValueError(f"{path} is not a topic recording (bad magic)")
    pos = len(MAGIC)
    (n,) = _U32.unpack_from(data, pos)
    pos += _U32.size
    rec = Recording(json.loads(bytes(data[pos : pos + n])))
    pos += n
    while pos < len(data):
        partition, offset, n_headers = _REC.unpack_from(data, pos)
        pos += _REC.size
        headers: Headers = []
        for _ in range(n_headers):
            (klen,) = _KEY.unpack_from(data, pos)
            pos += _KEY.size
            key = bytes(data[pos : pos + klen]).decode()
            pos += klen
            (vlen,) = _VAL.unpack_from(data, pos)
            pos += _VAL.size
            if vlen < 0:
                headers.append((key, None))
            else:
                headers.append((key, bytes(data[pos : pos + vlen])))
                pos += vlen
        (vlen,) = _U32.unpack_from(data, pos)
        pos += _U32.size
        rec.records.append(Record(partition, offset, data[pos : pos + vlen], headers))
        pos += vlen
    return rec


class ReplayMessage:
    """The part of confluent_kafka.Message that `PartitionReader.fill` reads."""

    __slots__ = ("_error", "_headers", "_offset", "_partition", "_value")

    def __init__(self, partition: int, offset: int, value, headers, error: KafkaError | None = None):
        self._partition, self._offset, self._value, self._headers, self._error = (
            partition,
            offset,
            value,
            headers,
            error,
        )

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return None if self._value is None else bytes(self._value)  # a copy, as confluent-kafka makes

    def headers(self) -> Headers | None:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error


class ReplayConsumer:
    """Serves recorded messages like an assigned consumer: consume() in offset order, pause/resume, EOF markers."""

    def __init__(self, by_partition: Mapping[int, Sequence[Record]], ends: Mapping[int, int]):
        self.records = {p: list(rs) for p, rs in by_partition.items()}
        self.ends = dict(ends)
        self.pos: dict[int, int] = {}
        self.eof_sent: set[int] = set()
        self.paused: set[int] = set()

    def assign(self, tps) -> None:
        for tp in tps:
            rs = self.records.get(tp.partition, [])
            self.pos[tp.partition] = next((i for i, r in enumerate(rs) if r.offset >= tp.offset), len(rs))

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[ReplayMessage]:
        out: list[ReplayMessage] = []
        for p in sorted(self.pos):
            if p in self.paused:
                continue
            rs, i = self.records[p], self.pos[p]
            take = rs[i : i + num_messages - len(out)]
            out.extend(ReplayMessage(p, r.offset, r.value, r.headers) for r in take)
            self.pos[p] = i + len(take)
            if self.pos[p] == len(rs) and p not in self.eof_sent and len(out) < num_messages:
                out.append(ReplayMessage(p, self.ends[p], None, None, KafkaError(KafkaError._PARTITION_EOF)))
                self.eof_sent.add(p)
            if len(out) >= num_messages:
                break
        if not out and timeout and timeout > 0:
            time.sleep(min(timeout, 0.001))
        return out

    def pause(self, tps) -> None:
        self.paused.update(tp.partition for tp in tps)

    def resume(self, tps) -> None:
        self.paused.difference_update(tp.partition for tp in tps)

    def get_watermark_offsets(self, tp, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        rs = self.records.get(tp.partition, [])
        return (rs[0].offset if rs else 0), self.ends.get(tp.partition, 0)

    def close(self) -> None:
        pass


def _default(name: str) -> Any:
    return LoaderConfig.model_fields[name].default


def replay_batches(
    rec: Recording,
    batch_size: int,
    *,
    num_workers: int = 1,
    seed: int = 0,
    pin_memory: bool = False,
    expected_tokenizer_hash: str | None = None,
    stop: threading.Event | None = None,
) -> Iterator[Batch]:
    """One pass over the recording: the loader's batches (bounded mode, rank 0 of 1), the short tail dropped."""
    partitions = rec.partitions()
    ends = rec.end_offsets()
    workers = partitions_for_rank(partitions, rank=0, world_size=1, num_workers=num_workers)
    readers = []
    for w, ps in workers.items():
        reader = PartitionReader(
            None,  # no broker: the consumer is the replay below
            rec.meta.get("topic", "replay"),
            ps,
            worker=w,
            client_id=f"replay.w{w}",
            seq_len=rec.seq_len,
            expected_tokenizer_hash=expected_tokenizer_hash,
            end_offsets=ends,
            consume_messages=_default("consume_messages"),
            max_buffered_messages=_default("max_buffered_messages"),
        )
        reader.consumer = ReplayConsumer({p: [r for r in rec.records if r.partition == p] for p in ps}, ends)
        starts = {p: min(r.offset for r in rec.records if r.partition == p) for p in ps}
        reader.consumer.assign([TopicPartition(rec.meta.get("topic", "replay"), p, off) for p, off in starts.items()])
        readers.append(reader)
    il = Interleaver(workers, seed=seed, rank=0)

    def snapshot(cursors: Mapping[int, Cursor], current: int | None) -> dict[str, Any]:
        return make_state(topic=rec.meta.get("topic", "replay"), topic_id=rec.meta.get("topic_id"), rank=0,
                          world_size=1, num_workers=num_workers, seed=seed, cursors=cursors, current=current,
                          interleave=il.get_state())  # fmt: skip

    assembler = BatchAssembler(
        readers,
        topic=rec.meta.get("topic", "replay"),
        batch_size=batch_size,
        seq_len=rec.seq_len,
        end_offsets=ends,
        idle_timeout_s=_default("idle_timeout_s"),
        poll_timeout_s=_default("poll_timeout_s"),
        trace=False,
        pin_memory=pin_memory,
        snapshot=snapshot,
        stop=stop or threading.Event(),
    )
    cursors = {p: Cursor(min(r.offset for r in rec.records if r.partition == p)) for p in partitions}
    # dead-letter budget 0: a message the loader would skip fails the replay instead of thinning the figures
    for item in assembler.run(il, cursors, None, set(partitions), 0):
        if isinstance(item, Batch):
            yield item


def cycle_batches(rec: Recording, batch_size: int, **kwargs: Any) -> Iterator[Batch]:
    """`replay_batches` pass after pass, for as long as the caller pulls."""
    while True:
        n = 0
        for batch in replay_batches(rec, batch_size, **kwargs):
            n += 1
            yield batch
        if n == 0:
            raise ValueError(f"the recording holds fewer than {batch_size} blocks: no batch")


def time_decode(rec: Recording, batch_size: int, min_seconds: float, **kwargs: Any) -> dict[str, float]:
    """Decode-and-batch tokens/s of this CPU: whole passes over the recording until `min_seconds` have passed."""
    tokens = pad = batches = passes = 0
    t0 = time.perf_counter()
    while passes == 0 or time.perf_counter() - t0 < min_seconds:
        for b in replay_batches(rec, batch_size, **kwargs):
            batches += 1
            tokens += b.tensor.numel() - b.pad_tokens
            pad += b.pad_tokens
        passes += 1
    seconds = time.perf_counter() - t0
    return {"tokens": tokens, "pad_tokens": pad, "batches": batches, "passes": passes, "seconds": seconds,
            "tokens_per_s": tokens / seconds if seconds > 0 else 0.0}  # fmt: skip
