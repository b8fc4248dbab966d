import numpy as np
import pytest

from pipeline_project.streaming.kafka_client import KafkaSettings
from pipeline_project.streaming.ledger import ProduceReport, ledger_topic
from pipeline_project.streaming.prefetch import prefetch_batches
from pipeline_project.streaming.producer import ProducerConfig, _rechunk, transactional_id_for


def _arr(start, n, seq_len=3):
    return np.arange(start * seq_len, (start + n) * seq_len, dtype=np.uint32).reshape(n, seq_len)


def test_rechunk_groups_into_full_messages_and_keeps_order():
    pieces = [_arr(0, 2), _arr(2, 0), _arr(2, 5), _arr(7, 1), _arr(8, 3)]
    out = list(_rechunk(pieces, per_message=4))
    assert [len(m) for m in out] == [4, 4, 3]
    np.testing.assert_array_equal(np.concatenate(out), _arr(0, 11))


def test_rechunk_splits_large_arrays_and_handles_empty_input():
    out = list(_rechunk([_arr(0, 10)], per_message=3))
    assert [len(m) for m in out] == [3, 3, 3, 1]
    np.testing.assert_array_equal(np.concatenate(out), _arr(0, 10))
    assert list(_rechunk([], per_message=3)) == []


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
