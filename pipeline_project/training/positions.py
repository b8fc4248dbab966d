"""Kafka positions from data-loader states: where an invocation started, where it stopped, what it read.

Input: one `KafkaBlockLoader.state_dict()` per rank, `{"partitions": {"<p>": {"offset": o, "block": b, ...}}}`,
where `offset` is the next message to read and `block` how many blocks of it were already used. Ranks that share
a partition each hold one stripe of it (`streaming/stripes.py`); their entries are merged into one position per
partition (the union of what every stripe consumed). Output is keyed by partition id as a string, in numeric
order. Pure functions; no Kafka access.
"""

from __future__ import annotations

from typing import Any

from pipeline_project.streaming.load.state import merge_positions


def _merged(states: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return merge_positions(s["partitions"] for s in states) if states else {}


def _end(entry: dict[str, Any]) -> int:
    """One past the last message the position counts as (partly) consumed."""
    ends = [entry["offset"] + (1 if entry.get("block", 0) > 0 else 0)]
    ends += [b for _, b in entry.get("done", ())] + [o + 1 for o, _ in entry.get("partial", ())]
    return max(ends)


def offsets_consumed(starts: list[dict[str, Any]], ends: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Merge per-rank loader states into {partition: [first, end)}: the Kafka offsets of the messages this
    invocation read blocks from. A message whose blocks were only partly trained on (the cursor has a
    block index) counts at both ends, so consecutive invocations may share one boundary message."""
    start, end = _merged(starts), _merged(ends)
    consumed = {}
    for p, entry in end.items():
        if p not in start or entry == start[p]:
            continue
        consumed[p] = [start[p]["offset"], _end(entry)]
    return consumed


def positions(states: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{partition: {"offset", "block"}}: the exact data position (next message, blocks already used of it), with
    `done` / `partial` when messages above it were consumed by ranks that shared the partition."""
    return _merged(states)
