import numpy as np
import pytest

from pipeline_project.streaming.kafka.client import KafkaSettings, transactional_id_for
from pipeline_project.streaming.ledger.records import ProduceReport, ledger_topic
from pipeline_project.streaming.produce.prefetch import prefetch_batches
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.staging import read_while, rechunk


def _arr(start, n, seq_len=3):
    return np.arange(start * seq_len, (start + n) * seq_len, dtype=np.uint32).reshape(n, seq_len)


def test_rechunk_groups_into_full_messages_and_keeps_order():
    pieces = [_arr(0, 2), _arr(2, 0), _arr(2, 5), _arr(7, 1), _arr(8, 3)]
    out = list(rechunk(pieces, per_message=4))
    assert [len(m) for m in out] == [4, 4, 3]
    np.testing.assert_array_equal(np.concatenate(out), _arr(0, 11))


def test_rechunk_splits_large_arrays_and_handles_empty_input():
    out = list(rechunk([_arr(0, 10)], per_message=3))
    assert [len(m) for m in out] == [3, 3, 3, 1]
    np.testing.assert_array_equal(np.concatenate(out), _arr(0, 10))
    assert list(rechunk([], per_message=3)) == []


def test_report_ledger_json_round_trip():
    r = ProduceReport(
        topic="t",
        ledger_key="2024-01-01",
        content_hash="c0ffee",
        tokenizer_name="ds",
        tokenizer_hash="ab",
        seq_len=4,
        offsets={0: (0, 9), 7: (3, 4)},
        messages=12,
        blocks=40,
        tokens=160,
        bytes=640,
        seconds=1.5,
        mb_per_s=0.1,
        transactional_id="tx",
        stage_seconds={"tokenize": 0.5},
        kafka_stats={"tx_msgs": 12},
    )
    back = ProduceReport.from_ledger_json(r.to_ledger_json())
    assert back == r
    assert back.offsets == {0: (0, 9), 7: (3, 4)}
    assert back.fingerprint() == ("c0ffee", "ab", 4)


def test_names_and_config_defaults():
    s = KafkaSettings(bootstrap_servers="a:1")
    assert ledger_topic("blocks") == "blocks.ledger"
    assert transactional_id_for(s, "blocks", "p1") == transactional_id_for(s, "blocks", "p1")
    assert transactional_id_for(s, "blocks", "p1") != transactional_id_for(s, "blocks", "p2")
    cfg = ProducerConfig()
    assert cfg.max_message_bytes < 1_000_000
    with pytest.raises(ValueError):
        ProducerConfig(max_message_bytes=0)


def test_report_metadata_is_json_friendly_with_offsets_table():
    import json

    r = ProduceReport(
        topic="t",
        ledger_key="k",
        content_hash="c",
        tokenizer_name="ds",
        tokenizer_hash="ab",
        seq_len=4,
        offsets={3: (10, 12), 0: (0, 4)},
        messages=8,
        blocks=8,
        tokens=32,
        bytes=128,
        seconds=2.0,
        mb_per_s=0.5,
        transactional_id="tx",
    )
    md = r.to_metadata()
    json.dumps(md)
    assert md["offsets"] == {"0": [0, 4], "3": [10, 12]}
    assert md["offsets_table"].splitlines()[2:] == ["| 0 | 0 | 4 | 5 |", "| 3 | 10 | 12 | 3 |"]
    assert (md["blocks"], md["tokens"], md["reused"]) == (8, 32, False)


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_prefetch_batches_keeps_order_and_sizes(depth):
    texts = (f"doc {i}" for i in range(23))
    out = list(prefetch_batches(texts, batch_docs=5, depth=depth))
    assert [len(b) for b in out] == [5, 5, 5, 5, 3]
    assert [t for b in out for t in b] == [f"doc {i}" for i in range(23)]


def test_prefetch_batches_reraises_reader_errors():
    def texts():
        yield from ("a", "b", "c")
        raise OSError("S3 connection reset")

    gen = prefetch_batches(texts(), batch_docs=2, depth=2)
    assert next(gen) == ["a", "b"]
    with pytest.raises(OSError, match="connection reset"):
        list(gen)


def test_prefetch_batches_close_stops_the_reader():
    import threading

    pulled = []

    def texts():
        for i in range(10_000):
            pulled.append(i)
            yield str(i)

    gen = prefetch_batches(texts(), batch_docs=10, depth=2)
    assert len(next(gen)) == 10
    gen.close()
    assert not any(t.name == "text-prefetch" and t.is_alive() for t in threading.enumerate())
    assert len(pulled) < 100  # bounded read-ahead, then stopped


def _encoder(seq_len=3):
    from pipeline_project.streaming.produce.staging import MessageEncoder, StreamHasher

    return MessageEncoder(tokenizer_name="t", tokenizer_hash="h", source="s", seq_len=seq_len, hasher=StreamHasher())


def test_stage_chunks_bounds_chunks_marks_the_last_and_hashes_the_stream_independently_of_cuts():
    from pipeline_project.streaming.produce.staging import StreamHasher, rechunk, stage_chunks

    enc = _encoder()
    chunks = list(stage_chunks(rechunk([_arr(0, 7), _arr(7, 4)], per_message=2), 2, enc))
    assert [len(c.messages) for c in chunks] == [2, 2, 2]  # 11 blocks: messages of 2,2,2,2,2,1
    assert [c.blocks for c in chunks] == [4, 4, 3]
    assert [c.last for c in chunks] == [False, False, True]
    whole = StreamHasher()
    whole.update(_arr(0, 11))
    assert chunks[-1].stream_hash == whole.hexdigest()
    prefix = StreamHasher()
    prefix.update(_arr(0, 4))
    assert chunks[0].stream_hash == prefix.hexdigest()  # taken before the look-ahead message is hashed
    assert list(stage_chunks(iter([]), 2, _encoder())) == []


def test_skip_blocks_drops_the_committed_prefix_after_checking_its_hash():
    from pipeline_project.streaming.errors import LedgerConflictError
    from pipeline_project.streaming.produce.staging import StreamHasher, skip_blocks

    committed = StreamHasher()
    committed.update(_arr(0, 5))
    h = StreamHasher()
    rest = list(skip_blocks([_arr(0, 3), _arr(3, 4)], 5, expected_hash=committed.hexdigest(), hasher=h, where="k"))
    np.testing.assert_array_equal(np.concatenate(rest), _arr(5, 2))
    assert h.hexdigest() == committed.hexdigest()
    with pytest.raises(LedgerConflictError, match="hash to"):
        list(skip_blocks([_arr(1, 7)], 5, expected_hash=committed.hexdigest(), hasher=StreamHasher(), where="k"))
    with pytest.raises(LedgerConflictError, match="yields only 3"):
        list(skip_blocks([_arr(0, 3)], 5, expected_hash=committed.hexdigest(), hasher=StreamHasher(), where="k"))


def test_progress_record_round_trip_and_old_readers_ignore_new_fields():
    from pipeline_project.streaming.ledger.records import ProgressRecord

    rec = ProgressRecord(ledger_key="k", content_hash="c", tokenizer_hash="t", seq_len=4, topic_id="id",
                         transactions=2, messages=6, blocks=20, bytes=320, pad_tokens=0, padded_blocks=0,
                         offsets={1: (0, 2)}, stream_hash="ab", transactional_id="tx")  # fmt: skip
    assert ProgressRecord.from_json(rec.to_json()) == rec
    import json

    newer = json.loads(rec.to_json()) | {"a_field_of_a_newer_writer": 1}
    assert ProgressRecord.from_json(json.dumps(newer).encode()) == rec


def test_producer_defaults_pad_the_tail_and_bound_transactions():
    cfg = ProducerConfig()
    assert cfg.pad_tail is True
    assert cfg.transaction_max_bytes == 64 << 20
    with pytest.raises(ValueError):
        produce_with_progress_suffix()


def produce_with_progress_suffix():
    from pipeline_project.streaming.produce.producer import produce_blocks

    produce_blocks(
        KafkaSettings(bootstrap_servers="a:1"),
        ProduceRequest(topic="t", ledger_key="k#progress", content_hash="c", source="s", seq_len=4, tokenizer=None),
        [],
    )


def test_read_while_stops_when_setup_is_done_or_at_the_byte_bound():
    blocks = [np.zeros((2, 4), np.uint32) for _ in range(10)]  # 32 bytes each
    items = iter(blocks)
    checks = iter([True, True, False])
    assert len(read_while(items, lambda: next(checks), max_bytes=1 << 20)) == 2
    assert len(list(items)) == 8  # the rest is left for the producer, in order
    assert len(read_while(iter(blocks), lambda: True, max_bytes=64)) == 2
    tagged = [("code", b) for b in blocks[:3]]
    assert read_while(iter(tagged), lambda: True, max_bytes=1 << 20) == tagged  # input exhausted
    assert read_while(iter(blocks), lambda: False, max_bytes=1 << 20) == []
