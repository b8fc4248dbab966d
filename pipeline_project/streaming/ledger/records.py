"""The ledger of a token-block topic: which ledger keys were produced, with what content, where.

The ledger is the compacted, 1-partition companion topic `<topic>.ledger`, replicated like its data
topic. It holds two kinds of record, each written in the same Kafka transaction as the blocks it
describes, so a read_committed reader sees a record exactly when its blocks are visible too:

* completion, key = the ledger key (e.g. the asset partition key): a `ProduceReport` as JSON
  (`LEDGER_SCHEMA`); the whole batch is in the topic.
* progress, key = `<ledger key>#progress`: a `ProgressRecord`, rewritten by every bounded
  transaction of a batch still being produced: how many blocks (a prefix of the batch's block
  stream) and offsets are committed so far, with the hash of that prefix. The completion record's
  transaction tombstones it.
* retirements, key = `<ledger key>#retired`: the audit log of the key's retired entries (`ledger_retire`),
  each with the record it retired (whose blocks stay in the topic), the reason, who and when; the latest
  value holds the whole log. A completion or progress record with retired content is not the key's entry.

`produce_blocks` (in `producer`) uses both to produce each key exactly once, resuming an
interrupted batch after its committed prefix. `read_ledger_records` reads to the partition's high
watermark: a read_committed reader that stopped at its first end-of-partition could stop before
records committed behind another producer's open transaction, and then produce them again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from pipeline_project.streaming.errors import ReadTimeoutError, is_transient
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.offsets import list_offsets
from pipeline_project.streaming.kafka.topics import ensure_companion_topic, topic_id
from pipeline_project.streaming.ledger.index import Changes, LedgerIndex, LedgerIndexUnavailableError
from pipeline_project.streaming.ledger.retirements import Retirement, retirements_from_json

log = logging.getLogger(__name__)

WATERMARK_TIMEOUT_S = 15.0

LEDGER_SUFFIX = ".ledger"
LEDGER_SCHEMA = 2
PROGRESS_SUFFIX = "#progress"
RETIRED_SUFFIX = "#retired"


def _known_fields(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """Drop keys a newer writer added, so an older reader still parses the record."""
    names = set(cls.__dataclass_fields__)
    return {k: v for k, v in d.items() if k in names}


def _offsets_from_json(raw: dict[str, Any]) -> dict[int, tuple[int, int]]:
    return {int(p): (int(r[0]), int(r[1])) for p, r in raw.items()}


def merge_ranges(a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Per-partition union of two (first, last) offset ranges."""
    out = dict(a)
    for p, (lo, hi) in b.items():
        out[p] = (min(lo, out[p][0]), max(hi, out[p][1])) if p in out else (lo, hi)
    return dict(sorted(out.items()))


def fingerprint_of(content_hash: str, tokenizer_hash: str, seq_len: int, packing_hash: str = "") -> tuple:
    """What makes two productions of a key the same content; plain packing keeps the 3-tuple of older records."""
    return (content_hash, tokenizer_hash, seq_len) + ((packing_hash,) if packing_hash else ())


@dataclass
class ProduceReport:
    """What one `produce_blocks` call wrote (or, with `reused=True`, found already recorded): the ledger value."""

    topic: str
    ledger_key: str
    content_hash: str
    tokenizer_name: str
    tokenizer_hash: str
    seq_len: int
    offsets: dict[int, tuple[int, int]]  # partition -> (first, last) offsets written, inclusive
    messages: int
    blocks: int
    tokens: int  # real tokens (document tokens and EOS separators): blocks * seq_len - pad_tokens
    bytes: int
    seconds: float  # the whole call: setup, reading/tokenizing the input, producing, commit
    mb_per_s: float  # bytes / seconds
    transactional_id: str
    reused: bool = False
    source: str = ""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    kafka_stats: dict[str, float] = field(default_factory=dict)
    packing: dict[str, int] = field(default_factory=dict)
    produced_at: float = field(default_factory=time.time)
    topic_id: str = ""  # the data topic's id when produced ("" in schema-1 records)
    tail_tokens: int = 0  # real tokens of the batch's partial last block (padded, or dropped)
    pad_tokens: int = 0  # PAD_TOKENs filling the partial last block
    dropped_tokens: int = 0  # tail tokens NOT in the topic (only with pad_tail=False)
    transactions: int = 0  # Kafka transactions that wrote the batch, over all attempts
    resumed_blocks: int = 0  # blocks an earlier, interrupted attempt had committed (skipped by this one)
    stream_hash: str = ""  # xxh3-64 of the batch's block stream, as little-endian uint32 bytes
    # per domain (messages with a domain header): {"messages", "blocks", "tokens", "pad_tokens", "docs"}
    domains: dict[str, dict[str, int]] = field(default_factory=dict)
    retired_blocks: int = 0  # blocks of retired entries of this key still in the topic (`ledger_retire`)
    packing_hash: str = ""  # FIM and rehydration (`tokenize_produce.packing_hash`); "" for plain packing, older records

    def to_ledger_json(self) -> bytes:
        d = asdict(self)
        d["offsets"] = {str(p): list(r) for p, r in self.offsets.items()}
        d["schema"] = LEDGER_SCHEMA
        d.pop("reused")
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_ledger_json(cls, raw: bytes) -> ProduceReport:
        d = json.loads(raw)
        d["offsets"] = _offsets_from_json(d["offsets"])
        return cls(**_known_fields(cls, d))

    def offsets_markdown(self) -> str:
        rows = [f"| {p} | {first} | {last} | {last - first + 1} |" for p, (first, last) in sorted(self.offsets.items())]
        return "\n".join(["| partition | first offset | last offset | offsets |", "|---|---|---|---|", *rows])

    def to_metadata(self) -> dict[str, Any]:
        """Flat, JSON-friendly summary for asset metadata (the Dagster layer wraps the values)."""
        return {
            "topic": self.topic,
            "ledger_key": self.ledger_key,
            "reused": self.reused,
            "blocks": self.blocks,
            "tokens": self.tokens,
            "tail_tokens": self.tail_tokens,
            "pad_tokens": self.pad_tokens,
            "dropped_tokens": self.dropped_tokens,
            "transactions": self.transactions,
            "resumed_blocks": self.resumed_blocks,
            "messages": self.messages,
            "bytes": self.bytes,
            "seq_len": self.seq_len,
            "tokenizer": self.tokenizer_name,
            "tokenizer_hash": self.tokenizer_hash,
            "content_hash": self.content_hash,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 2),
            "offsets": {str(p): [first, last] for p, (first, last) in sorted(self.offsets.items())},
            "offsets_table": self.offsets_markdown(),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "kafka_stats": self.kafka_stats,
            "packing": self.packing,
            "domains": self.domains,
            "retired_blocks": self.retired_blocks,
        }

    def fingerprint(self) -> tuple:
        return fingerprint_of(self.content_hash, self.tokenizer_hash, self.seq_len, self.packing_hash)


@dataclass
class ProgressRecord:
    """A batch still being produced: its first `blocks` blocks are committed in `transactions` transactions."""

    ledger_key: str
    content_hash: str
    tokenizer_hash: str
    seq_len: int
    topic_id: str
    transactions: int
    messages: int
    blocks: int
    bytes: int
    pad_tokens: int
    padded_blocks: int
    offsets: dict[int, tuple[int, int]]
    stream_hash: str  # of the committed prefix
    transactional_id: str
    updated_at: float = field(default_factory=time.time)
    domains: dict[str, dict[str, int]] = field(default_factory=dict)  # per domain, as `BatchTotals.domains`
    packing_hash: str = ""  # as ProduceReport.packing_hash

    def to_json(self) -> bytes:
        d = asdict(self)
        d["offsets"] = {str(p): list(r) for p, r in self.offsets.items()}
        d["kind"] = "progress"
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ProgressRecord:
        d = json.loads(raw)
        d["offsets"] = _offsets_from_json(d["offsets"])
        return cls(**_known_fields(cls, d))

    def fingerprint(self) -> tuple:
        return fingerprint_of(self.content_hash, self.tokenizer_hash, self.seq_len, self.packing_hash)


@dataclass
class LedgerRecords:
    completed: dict[str, ProduceReport]
    progress: dict[str, ProgressRecord]  # by ledger key (without the suffix)
    read: int = 0  # ledger records read from Kafka (with an index: those written since its offsets)
    retired: dict[str, list[Retirement]] = field(default_factory=dict)  # by ledger key: its audit log

    def drop_retired(self) -> None:
        """Forget completion and progress records of retired content: a cache that missed the retirement's
        tombstones (compacted away) still decides as the ledger does."""
        for key, log in self.retired.items():
            for records in (self.completed, self.progress):
                if key in records and any(r.covers(records[key]) for r in log):
                    del records[key]


def progress_key(ledger_key: str) -> str:
    return ledger_key + PROGRESS_SUFFIX


def retired_key(ledger_key: str) -> str:
    return ledger_key + RETIRED_SUFFIX


def ledger_topic(topic: str) -> str:
    return topic + LEDGER_SUFFIX


def ensure_ledger_topic(admin: Any, topic: str, timeout_s: float = 30.0) -> None:
    """Compacted 1-partition ledger, replicated like its data topic."""
    ensure_companion_topic(admin, topic, ledger_topic(topic), timeout_s)


def read_ledger(
    settings: KafkaSettings,
    topic: str,
    timeout_s: float = 30.0,
    keys: Collection[str] | None = None,
    index: LedgerIndex | None = None,
) -> dict[str, ProduceReport]:
    """The completion records of `topic`'s ledger, latest per key (tombstones remove a key); see read_ledger_records."""
    return read_ledger_records(settings, topic, timeout_s, keys=keys, index=index).completed


def read_ledger_records(
    settings: KafkaSettings,
    topic: str,
    timeout_s: float = 30.0,
    keys: Collection[str] | None = None,
    index: LedgerIndex | None = None,
) -> LedgerRecords:
    """The committed ledger records of `topic`, latest per key, read up to the high watermark seen at the start.

    `keys`: only these ledger keys' records (completion and progress) are kept and parsed, so memory does not grow
    with the ledger. `index` (with `keys`): a `ledger_index.LedgerIndex`; the read starts at the offset up to which
    the index has every record, takes the keys' older records from it, and gives it the records read, so a read
    costs the records written since the last one. An unreachable index is logged and the ledger read from the start.

    A missing ledger topic reads as empty; not reaching that end within `timeout_s` (an open transaction of another
    producer holds the last stable offset back) raises ReadTimeoutError. Fetching the high watermark is one
    metadata round trip with a budget of its own (at least `WATERMARK_TIMEOUT_S`), so a short read timeout
    bounds the wait for other transactions, not a slow broker's first answer.
    """
    name = ledger_topic(topic)
    records = LedgerRecords({}, {})
    wanted = None if keys is None else {k for key in keys for k in (key, progress_key(key), retired_key(key))}
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        md = consumer.list_topics(topic=name, timeout=timeout_s).topics.get(name)
        if md is None or md.error is not None:
            return records
        parts = sorted(md.partitions)
        admin = settings.make_admin()
        positions: dict[int, int] = {}
        ledger_id = ""
        if index is not None and wanted is not None:
            ledger_id = topic_id(admin, name, timeout_s)
            index, positions = _index_snapshot(index, ledger_id, wanted, records, name)
        starts = {p: positions.get(p, 0) for p in parts}
        ends = _high_watermarks(admin, name, parts, max(timeout_s, WATERMARK_TIMEOUT_S))
        # below the log start (records deleted): librdkafka resets to the earliest offset
        consumer.assign([TopicPartition(name, p, starts[p] or OFFSET_BEGINNING) for p in parts])
        reader = _LedgerReader(records, wanted, ends, keep_changes=index is not None)
        reader.read(consumer, {p for p in parts if ends[p] > starts[p]}, name, timeout_s)
        if index is not None:
            try:
                index.update(ledger_id, reader.changes, {p: max(starts[p], ends[p]) for p in parts})
            except LedgerIndexUnavailableError as exc:
                log.warning("%s; the ledger index stays at its previous offsets", exc)
        records.drop_retired()
        return records
    finally:
        consumer.close()


def _index_snapshot(
    index: LedgerIndex, ledger_id: str, wanted: set[str], records: LedgerRecords, name: str
) -> tuple[LedgerIndex | None, dict[int, int]]:
    """The index's offsets and its records of `wanted` (applied to `records`); (None, {}) when it is unreachable."""
    try:
        positions, cached = index.snapshot(ledger_id, wanted)
    except LedgerIndexUnavailableError as exc:
        log.warning("%s; reading ledger %s from the start", exc, name)
        return None, {}
    for key, value in cached.items():
        _apply(records, key, value)
    return index, positions


class _LedgerReader:
    """Consumes the assigned ledger partitions up to `ends` into `records` (and `changes`, for the index)."""

    def __init__(
        self, records: LedgerRecords, wanted: set[str] | None, ends: dict[int, int], *, keep_changes: bool
    ) -> None:
        self.records, self.wanted, self.ends, self.keep_changes = records, wanted, ends, keep_changes
        self.changes: Changes = {}

    def read(self, consumer: Any, pending: set[int], name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise ReadTimeoutError(
                    f"reading ledger {name} did not reach its high watermark {self.ends} within {timeout_s:g}s "
                    "(an open transaction holds the last stable offset back?)"
                )
            # consume() waits its whole timeout unless it fills num_messages: a short one keeps a small read fast
            for msg in consumer.consume(num_messages=1000, timeout=0.05):
                self._take(msg, pending)

    def _take(self, msg: Any, pending: set[int]) -> None:
        err = msg.error()
        p = msg.partition()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                if msg.offset() >= self.ends.get(p, 0):
                    pending.discard(p)
                return
            if is_transient(err):
                return  # librdkafka retries on its own; the deadline bounds the wait
            raise KafkaException(err)
        if msg.offset() + 1 >= self.ends.get(p, 0):
            pending.discard(p)
        self.records.read += 1
        key = (msg.key() or b"").decode()
        if self.keep_changes:
            self.changes[key] = (p, msg.offset(), msg.value())
        if self.wanted is None or key in self.wanted:
            _apply(self.records, key, msg.value())


def _apply(records: LedgerRecords, key: str, value: bytes | None) -> None:
    if key.endswith(RETIRED_SUFFIX):
        key = key[: -len(RETIRED_SUFFIX)]
        if value is None:
            records.retired.pop(key, None)
        else:
            records.retired[key] = retirements_from_json(value)
    elif key.endswith(PROGRESS_SUFFIX):
        key = key[: -len(PROGRESS_SUFFIX)]
        if value is None:
            records.progress.pop(key, None)
        else:
            records.progress[key] = ProgressRecord.from_json(value)
    elif value is None:
        records.completed.pop(key, None)
    else:
        records.completed[key] = ProduceReport.from_ledger_json(value)


def _high_watermarks(admin: Any, name: str, parts: list[int], timeout_s: float) -> dict[int, int]:
    """Log end offsets (read_uncommitted latest): every record written so far, committed or not. The caller holds
    `admin` until this returns: a collected client never completes its futures."""
    return list_offsets(admin, name, parts, OffsetSpec.latest(), timeout_s, IsolationLevel.READ_UNCOMMITTED)
