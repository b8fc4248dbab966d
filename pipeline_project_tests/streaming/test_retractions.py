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
