"""Span records (`streaming.spans`) against the packer: every block's tokens are exactly the recorded pieces of
the recorded documents (pure logic, no Kafka), also when a resumed batch skips its committed prefix."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline_project.streaming.kafka.format import PAD_TOKEN
from pipeline_project.streaming.kafka.spans import (
    MAX_HEADER_BYTES,
    Span,
    SpanRecorder,
    SpansNotRecorded,
    decode_spans,
    encode_spans,
    spans_of_block,
)
from pipeline_project.streaming.produce.packing import DomainPackers
from pipeline_project.streaming.produce.staging import rechunk, split_item
from pipeline_project.training.step_log import StepLog, runs_of

SEQ, EOS, PER_MESSAGE = 16, 1, 3


def _corpus(seed: int = 0, n: int = 300):
    rng = np.random.default_rng(seed)
    docs, domains, fim = [], [], []
    for _ in range(n):
        length = int(rng.choice([0, 1, 3, 15, 16, 40, 90]))
        docs.append(rng.integers(2, 1000, length).astype(np.uint32))
        domains.append(["en_web", "code", "zh_web"][int(rng.integers(0, 3))])
        fim.append(bool(rng.random() < 0.3))
    return docs, domains, fim


def _messages(docs, domains, fim, recorder: SpanRecorder, batch: int = 37):
    packer = DomainPackers(SEQ, EOS)

    def items():
        for i in range(0, len(docs), batch):
            recorder.note(docs[i : i + batch], domains[i : i + batch], fim[i : i + batch])
            yield from packer.add(docs[i : i + batch], domains[i : i + batch])
        yield from packer.flush(pad=True)

    return [split_item(m) for m in rechunk(items(), PER_MESSAGE)]


def _rebuild(spans, n_blocks, docs):
    out = np.full((n_blocks, SEQ), PAD_TOKEN, dtype=np.uint32)
    for b in range(n_blocks):
        for at, s in spans_of_block(spans, SEQ, b):
            full = np.append(docs[s.ordinal], np.uint32(EOS))
            out[b, at : at + s.count] = full[s.first : s.first + s.count]
    return out


def test_every_block_is_the_recorded_pieces_of_its_documents():
    docs, domains, fim = _corpus()
    recorder = SpanRecorder(SEQ)
    messages = _messages(docs, domains, fim, recorder)
    for domain, blocks in messages:
        spans = decode_spans(recorder.header(domain, len(blocks))[1])
        assert all(domains[s.ordinal] == domain and s.fim == fim[s.ordinal] for s in spans)
        np.testing.assert_array_equal(_rebuild(spans, len(blocks), docs), blocks)
    assert recorder.ordinal == len(docs)


def test_a_resumed_batch_skips_the_committed_prefix_and_records_the_same_spans():
    docs, domains, fim = _corpus(seed=1)
    first = SpanRecorder(SEQ)
    expected = [first.header(d, len(b)) for d, b in _messages(docs, domains, fim, first)]
    again = SpanRecorder(SEQ)
    messages = _messages(docs, domains, fim, again)
    for domain, blocks in messages[:7]:
        again.skip(domain, len(blocks))
    assert [again.header(d, len(b)) for d, b in messages[7:]] == expected[7:]


def test_header_encoding_round_trips_compresses_and_gives_up_past_its_budget():
    spans = [Span(3, 5, 11, False), Span(4, 0, 200, True), Span(90, 0, 2, False)]
    assert decode_spans(encode_spans(spans)) == spans
    many = [Span(i, 0, 2, False) for i in range(6000)]  # tiny documents: plain is over budget, zstd is not
    value = encode_spans(many)
    assert value[0] == 2 and len(value) <= MAX_HEADER_BYTES and decode_spans(value) == many
    rng = np.random.default_rng(0)
    noise = [Span(int(o), int(f), int(c), bool(c & 1)) for o, f, c in
             zip(np.cumsum(rng.integers(1, 1 << 20, 9000)), rng.integers(0, 1 << 20, 9000),
                 rng.integers(1, 1 << 14, 9000), strict=True)]  # fmt: skip
    with pytest.raises(SpansNotRecorded):
        decode_spans(encode_spans(noise))


class _TracingLoader:
    def __init__(self, traces):
        self.traces, self.trace = traces, []

    def __iter__(self):
        for i, t in enumerate(self.traces):
            self.trace.extend(t)
            yield i


def test_step_log_keeps_runs_per_step_and_hands_out_only_trained_steps():
    assert runs_of([(0, 5, 2), (0, 5, 3), (1, 9, 0, "code"), (0, 5, 4)]) == [[0, 5, 2, 2], [1, 9, 0, 1], [0, 5, 4, 1]]
    log = StepLog(_TracingLoader([[(0, 1, 0), (0, 1, 1)], [(2, 4, 7), (2, 6, 0)], [(3, 3, 3)]]), start_step=10)
    it = iter(log)
    next(it), next(it), next(it)  # the third batch is fetched; say it was not trained
    assert log.take(12) == {"11": [[0, 1, 0, 2]], "12": [[2, 4, 7, 1], [2, 6, 0, 1]]}
    assert log.take(12) == {}


def test_a_spans_header_that_inflates_past_its_bound_is_refused_without_inflating_it():
    """Issue 37 finding 8: 8 KiB of zstd header could declare ~256 MiB and be walked byte by byte."""
    import tracemalloc

    import zstandard

    from pipeline_project.streaming.kafka.spans import MAX_BODY_BYTES, TAG_ZSTD, decode_spans

    compressor = zstandard.ZstdCompressor(level=19).compressobj()
    packed = b"".join(compressor.compress(b"\x01" * (1 << 20)) for _ in range(256)) + compressor.flush()
    assert len(packed) < 64 << 10  # a header the topic would carry
    tracemalloc.start()
    with pytest.raises(ValueError, match="inflates past"):
        decode_spans(bytes([TAG_ZSTD]) + packed)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 3 * MAX_BODY_BYTES  # bounded by the cap, not by what the header declares
    with pytest.raises(ValueError, match="truncated"):
        decode_spans(bytes([1, 0x81]))  # a varint cut off
