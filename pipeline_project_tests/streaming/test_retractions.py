"""Retractions in pure logic: the request model, the index, and the assembler passing retracted blocks over (the
cursor moves past them, no row holds them, each batch records them) while the rows it yields stay in order."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np
import pytest
from pydantic import ValidationError

from pipeline_project.streaming.load.assembler import Batch, BatchAssembler, End
from pipeline_project.streaming.load.partition_reader import BufferEntry
from pipeline_project.streaming.load.state import Cursor, Interleaver
from pipeline_project.streaming.retractions import BlockRange, Retraction, RetractionIndex

SEQ_LEN = 2


def _retraction(request: str, *blocks: BlockRange, reason: str = "takedown") -> Retraction:
    return Retraction(request_id=request, reason=reason, blocks=blocks)


def test_a_request_names_blocks_with_a_reason_and_a_safe_id():
    with pytest.raises(ValidationError, match="request id"):
        _retraction("../etc", BlockRange(partition=0, offset=1))
    with pytest.raises(ValidationError, match="is empty"):
        BlockRange(partition=0, offset=1, first=3, end=3)
    with pytest.raises(ValidationError):
        Retraction(request_id="r1", reason="x", blocks=())


def test_the_index_answers_per_block_and_keeps_the_first_request_of_an_id():
    index = RetractionIndex([_retraction("r1", BlockRange(partition=0, offset=5, first=1, end=3))])
    assert index.covers(0, 5) and not index.covers(0, 6) and not index.covers(1, 5)
    assert [index.request_of(0, 5, b) for b in range(4)] == [None, "r1", "r1", None]
    assert index.add(_retraction("r2", BlockRange(partition=0, offset=5))) is True
    assert [index.request_of(0, 5, b) for b in range(4)] == ["r2", "r1", "r1", "r2"]  # the first added wins
    assert index.add(_retraction("r1", BlockRange(partition=1, offset=0))) is False  # an id is never changed
    assert not index.covers(1, 0) and len(index) == 2


class Reader:
    """Partition 0: three messages of four blocks each; block b of message o holds tokens (10 * o + b, -)."""

    def __init__(self):
        self.partitions = (0,)
        blocks = [np.array([[10 * o + b, 0] for b in range(4)], dtype=np.uint32) for o in range(3)]
        self.buffers = {0: deque(BufferEntry(o, blocks[o]) for o in range(3))}

    def fill(self, timeout: float) -> int:
        return 0

    def drained(self, p: int) -> None:
        pass


def _batches(index: RetractionIndex | None, batch_size: int = 3) -> list:
    assembler = BatchAssembler(
        [Reader()], topic="t", batch_size=batch_size, seq_len=SEQ_LEN, end_offsets={0: 3}, idle_timeout_s=0.1,
        poll_timeout_s=0.01, trace=True, pin_memory=False, stop=threading.Event(), retractions=index,
        snapshot=lambda cursors, current: {"cursor": cursors[0]},
    )  # fmt: skip
    return list(assembler.run(Interleaver({0: (0,)}, seed=0, rank=0), {0: Cursor(0)}, None, {0}))


def test_retracted_blocks_are_passed_over_and_recorded_by_the_batch_that_passed_them():
    index = RetractionIndex(
        [
            _retraction("gdpr-1", BlockRange(partition=0, offset=0, first=1, end=3)),
            _retraction("bad-batch", BlockRange(partition=0, offset=1)),  # a whole message
        ]
    )
    items = _batches(index)
    batches = [i for i in items if isinstance(i, Batch)]
    rows = [r[0] for b in batches for r in b.tensor.tolist()]
    assert rows == [0, 3, 20, 21, 22, 23]  # every block but the retracted ones, in order
    assert [b.trace for b in batches] == [[(0, 0, 0), (0, 0, 3), (0, 2, 0)], [(0, 2, 1), (0, 2, 2), (0, 2, 3)]]
    assert batches[0].retracted == [(0, 0, 1, "gdpr-1"), (0, 0, 2, "gdpr-1")] + [
        (0, 1, b, "bad-batch") for b in range(4)
    ]
    assert batches[1].retracted == []
    assert batches[0].state == {"cursor": Cursor(2, 1)} and isinstance(items[-1], End)


def test_without_retractions_the_same_reader_yields_every_block():
    rows = [r[0] for b in _batches(None) if isinstance(b, Batch) for r in b.tensor.tolist()]
    assert rows == [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]


def test_a_stream_whose_tail_is_retracted_ends_without_a_short_batch():
    index = RetractionIndex([_retraction("r", BlockRange(partition=0, offset=2))])
    items = _batches(index, batch_size=4)
    assert [type(i) for i in items] == [Batch, Batch, End]
    assert [r[0] for r in items[1].tensor.tolist()] == [10, 11, 12, 13]


def test_a_run_of_whole_messages_is_one_interval_and_the_earliest_request_owns_an_overlap():
    index = RetractionIndex(
        [
            _retraction("r1", BlockRange(partition=0, offset=10, last_offset=19)),
            _retraction("r2", BlockRange(partition=0, offset=15, last_offset=30), BlockRange(partition=1, offset=0)),
            _retraction("r3", BlockRange(partition=0, offset=12, first=2, end=4)),
        ]
    )
    assert [index.covers(0, o) for o in (9, 10, 19, 20, 30, 31)] == [False, True, True, True, True, False]
    assert [index.request_of(0, o, 0) for o in (10, 15, 19, 20, 30)] == ["r1", "r1", "r1", "r2", "r2"]
    assert index.request_of(0, 12, 3) == "r1"  # the run came first
    assert index.covers(1, 0) and not index.covers(1, 1) and index.request_of(1, 0, 7) == "r2"
    index.add(_retraction("r4", BlockRange(partition=0, offset=31, last_offset=40)))  # added after a lookup
    assert index.request_of(0, 35, 0) == "r4" and not index.covers(0, 41)


def test_a_partial_range_added_first_keeps_its_blocks_against_a_later_run():
    index = RetractionIndex(
        [
            _retraction("early", BlockRange(partition=0, offset=5, first=1, end=2)),
            _retraction("late", BlockRange(partition=0, offset=0, last_offset=9)),
        ]
    )
    assert [index.request_of(0, 5, b) for b in range(3)] == ["late", "early", "late"]


def test_a_run_holds_whole_messages_only():
    with pytest.raises(ValidationError, match="whole messages"):
        BlockRange(partition=0, offset=5, last_offset=9, first=1)
    with pytest.raises(ValidationError, match="whole messages"):
        BlockRange(partition=0, offset=5, last_offset=4)


def test_a_large_request_splits_into_parts_the_index_merges_and_counts():
    blocks = tuple(BlockRange(partition=p, offset=o) for p in range(3) for o in range(0, 20, 2))
    request = _retraction("big", *blocks)
    parts = request.split(per_part=7)
    assert [(p.part, p.parts, len(p.blocks)) for p in parts] == [(0, 5, 7), (1, 5, 7), (2, 5, 7), (3, 5, 7), (4, 5, 2)]
    assert [p.key for p in parts][:2] == ["big#0/5", "big#1/5"] and request.split(per_part=7) == parts  # the same
    index = RetractionIndex()
    assert index.add(parts[3]) and index.add(parts[0]) and not index.add(parts[0])
    assert index.parts_of("big") == {0, 3} and len(index) == 1
    for part in parts:
        index.add(part)
    assert index.parts_of("big") == set(range(5)) and set(index.requests["big"].blocks) == set(blocks)
    assert all(index.covers(p, o) for p in range(3) for o in range(0, 20, 2)) and not index.covers(0, 1)
    with pytest.raises(ValidationError, match="parts count from 0"):
        Retraction(request_id="x", reason="y", blocks=blocks[:1], part=2, parts=2)


def test_a_record_is_small_json_that_reads_back_equal():
    request = _retraction("r", BlockRange(partition=2, offset=100, last_offset=900))
    body = request.to_json()
    assert b'"part"' not in body and b"null" not in body and len(body) < 200
    assert Retraction.model_validate_json(body) == request


def test_a_million_retracted_messages_in_runs_cost_a_bisection():
    index = RetractionIndex(
        _retraction(
            f"batch-{i}", BlockRange(partition=i % 8, offset=(i // 8) * 1000, last_offset=(i // 8) * 1000 + 999)
        )
        for i in range(1000)
    )  # 1,000 requests of 1,000 messages each: 10^6 messages
    assert index.covers(3, 123 * 1000 + 500) and index.request_of(3, 123 * 1000 + 500, 0) == f"batch-{123 * 8 + 3}"
    assert not index.covers(3, 125 * 1000) and index.covers(3, 0)
