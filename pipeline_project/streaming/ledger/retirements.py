"""Retired ledger entries: the audit log a ledger key keeps under `<ledger key>#retired` (see `ledger_retire`).

A retirement is an operator's decision that a batch's ledger entry (a completion or a progress record) no longer
stands for the batch, so the batch can be produced afresh with other content. The retired record's blocks stay
in the topic: Kafka cannot delete from the middle of a partition, and read_committed readers (the trainer) read
them like any committed blocks. The log keeps the retired record whole (content hash, blocks, offsets), so the
topic's blocks stay accounted for: every block is reported by one completion record, one progress record of a
batch still being produced, or one retirement.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class _Fingerprinted(Protocol):
    content_hash: str
    topic_id: str

    def fingerprint(self) -> tuple: ...


@dataclass
class Retirement:
    """A retired entry: the record it was (`kind` "completed" or "progress"), why, by whom and when."""

    kind: str
    record: dict[str, Any]  # the retired record's JSON: a ProduceReport's or a ProgressRecord's
    reason: str
    operator: str
    retired_at: float = field(default_factory=time.time)

    @property
    def content_hash(self) -> str:
        return self.record["content_hash"]

    @property
    def topic_id(self) -> str:
        return self.record.get("topic_id", "")

    @property
    def blocks(self) -> int:
        return int(self.record.get("blocks", 0))

    @property
    def offsets(self) -> dict[int, tuple[int, int]]:
        return {int(p): (int(r[0]), int(r[1])) for p, r in self.record.get("offsets", {}).items()}

    def fingerprint(self) -> tuple:
        """The retired record's fingerprint (`records.fingerprint_of`): content, tokenizer, length, packing."""
        r = self.record
        plain = (r["content_hash"], r.get("tokenizer_hash", ""), int(r.get("seq_len", 0)))
        return plain + ((r["packing_hash"],) if r.get("packing_hash") else ())

    def covers(self, record: _Fingerprinted) -> bool:
        """Is `record` this retired entry (or an older state of it)? The same blocks never return under its key in
        the same topic (`producer` refuses them), so fingerprint and topic id identify it."""
        return (record.fingerprint(), record.topic_id) == (self.fingerprint(), self.topic_id)


def retirements_to_json(ledger_key: str, log: list[Retirement]) -> bytes:
    body = {"kind": "retired", "ledger_key": ledger_key, "retirements": [asdict(r) for r in log]}
    return json.dumps(body, sort_keys=True).encode()


def retirements_from_json(raw: bytes) -> list[Retirement]:
    names = set(Retirement.__dataclass_fields__)
    return [Retirement(**{k: v for k, v in r.items() if k in names}) for r in json.loads(raw)["retirements"]]
