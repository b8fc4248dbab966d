"""What a checkpoint trained on, from its own records: the step logs (`provenance/steps.json`) of the checkpoint and
of every checkpoint before it in the lineage (each names the one before as `previous`).

A step log holds, per rank and step, the runs `[partition, offset, first block, count]` the rank trained, and the
blocks it passed over as retracted `[partition, offset, block, request]`. That is the exact record: the resume
state's positions say where the loaders stand, not which messages between two positions were trained (retracted
ones were not), and the checkpoint asset's `offsets_consumed` is per invocation and lives in Dagster. A message
belongs to the batch whose ledger record (completion, progress or retired) names an offset range holding it; when
two records' ranges hold it (batches produced at once share partitions), its `src` header decides (`resolve`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeline_project.streaming.retractions.model import BlockRange

Run = tuple[int, int, int, int]  # partition, offset, first block, count
Ranges = dict[int, tuple[int, int]]  # partition -> (first, last) offsets, inclusive


@dataclass
class Trained:
    topic: str = ""
    seq_len: int = 0
    runs: list[Run] = field(default_factory=list)
    passed_over: Counter[str] = field(default_factory=Counter)  # request id -> blocks passed over
    checkpoints: int = 0  # step logs read

    def blocks_by_message(self) -> Counter[tuple[int, int]]:
        out: Counter[tuple[int, int]] = Counter()
        for p, offset, _first, count in self.runs:
            out[(p, offset)] += count
        return out


def add_step_log(trained: Trained, body: dict[str, Any]) -> None:
    """Take one `steps.json` into `trained`."""
    trained.topic = trained.topic or body.get("topic", "")
    trained.seq_len = trained.seq_len or int(body.get("seq_len", 0))
    trained.checkpoints += 1
    for steps in body.get("ranks", []):
        for runs in steps.values():
            trained.runs += [(int(p), int(o), int(f), int(n)) for p, o, f, n in runs]
    for steps in body.get("retracted", []):
        for passed in steps.values():
            trained.passed_over.update(str(r[3]) for r in passed)


def read_trained(s3: Any, bucket: str, checkpoint_uri: str) -> Trained:
    """The runs trained up to the checkpoint at `checkpoint_uri`, walking its lineage back from it."""
    from pipeline_project.common.s3 import key_in_bucket
    from pipeline_project.training.step_log import STEPS_FILE

    trained = Trained()
    uri: str | None = checkpoint_uri
    seen: set[str] = set()
    while uri and uri not in seen:
        seen.add(uri)
        try:
            raw = s3.get_object(Bucket=bucket, Key=f"{key_in_bucket(uri, bucket).rstrip('/')}/{STEPS_FILE}")
        except s3.exceptions.NoSuchKey:
            break  # saved before step logs were written: what trained earlier is not known
        body = json.loads(raw["Body"].read())
        add_step_log(trained, body)
        uri = body.get("previous")
    return trained


def attribute(
    messages: Iterable[tuple[int, int]],
    ranges: dict[str, Ranges],
    resolve: Callable[[list[tuple[int, int]]], dict[tuple[int, int], str]] | None = None,
) -> dict[tuple[int, int], str | None]:
    """Each message -> the batch whose offset ranges hold it (None: none does). A message in several batches' ranges
    goes to `resolve` (its `src` header); without one it stays None."""
    by_partition: dict[int, list[tuple[int, int, str]]] = {}
    for batch, r in ranges.items():
        for p, (first, last) in r.items():
            by_partition.setdefault(int(p), []).append((int(first), int(last), batch))
    out: dict[tuple[int, int], str | None] = {}
    ambiguous = []
    for p, offset in messages:
        holders = {b for first, last, b in by_partition.get(p, ()) if first <= offset <= last}
        if len(holders) > 1:
            ambiguous.append((p, offset))
        out[(p, offset)] = holders.pop() if len(holders) == 1 else None
    if ambiguous and resolve is not None:
        out.update(resolve(ambiguous))
    return out


def _overlap(run: Run, r: BlockRange) -> int:
    p, offset, first, count = run
    if r.partition != p:
        return 0
    if r.last_offset is not None:
        return count if r.offset <= offset <= r.last_offset else 0
    if r.offset != offset:
        return 0
    end = r.end if r.end is not None else first + count
    return max(0, min(first + count, end) - max(first, r.first))


def trained_retracted(runs: list[Run], blocks: Iterable[BlockRange]) -> int:
    """Blocks of `runs` that `blocks` retract: trained before the retraction reached the ranks."""
    by_partition: dict[int, list[BlockRange]] = {}
    for r in blocks:
        by_partition.setdefault(r.partition, []).append(r)
    return sum(_overlap(run, r) for run in runs for r in by_partition.get(run[0], ()))
