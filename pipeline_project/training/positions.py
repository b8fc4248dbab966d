"""Kafka positions from data-loader states: where an invocation started, where it stopped, what it read.

Input: one `KafkaBlockLoader.state_dict()` per rank, `{"partitions": {"<p>": {"offset": o, "block": b}}}`,
where `offset` is the next message to read and `block` how many blocks of it were already used. Output is
keyed by partition id as a string, in numeric order. Pure functions; no Kafka access.
"""

from __future__ import annotations

from typing import Any


def _cursors(states: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    return {p: (c["offset"], c.get("block", 0)) for s in states for p, c in s["partitions"].items()}


def offsets_consumed(starts: list[dict[str, Any]], ends: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Merge per-rank loader states into {partition: [first, end)}: the Kafka offsets of the messages this
    invocation read blocks from. A message whose blocks were only partly trained on (the cursor has a
    block index) counts at both ends, so consecutive invocations may share one boundary message."""
    start, end = _cursors(starts), _cursors(ends)
    consumed = {}
    for p in sorted(end, key=int):
        if p not in start or end[p] == start[p]:
            continue
        end_offset = end[p][0] + (1 if end[p][1] > 0 else 0)
        consumed[p] = [start[p][0], end_offset]
    return consumed


def positions(states: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{partition: {"offset", "block"}}: the exact data position (next message, blocks already used of it)."""
    return {p: {"offset": o, "block": b} for p, (o, b) in sorted(_cursors(states).items(), key=lambda i: int(i[0]))}
