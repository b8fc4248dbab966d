"""bench/gpu_bench.py's replay: a recorded topic segment through the loader's decode-and-batch code, no services."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline_project.streaming.kafka.format import PAD_TOKEN, encode_message

BENCH = Path(__file__).resolve().parents[2] / "bench"
SEQ_LEN = 16
VOCAB = 1000


@pytest.fixture(scope="module")
def replay():
    spec = importlib.util.spec_from_file_location("topic_replay", BENCH / "topic_replay.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["topic_replay"] = module
    spec.loader.exec_module(module)
    return module


def synthetic_records(replay, rng):
    """3 partitions, offsets with gaps (transaction markers), uneven message sizes, one padded message (v2)."""
    records, all_blocks = [], []
    for p, sizes in {0: [3, 5, 1], 1: [7, 1], 2: [2, 2, 4, 1]}.items():
        for i, n in enumerate(sizes):
            blocks = rng.integers(0, VOCAB, size=(n, SEQ_LEN), dtype=np.uint32)
            if (p, i) == (2, 3):
                blocks[-1, SEQ_LEN - 5 :] = PAD_TOKEN
            value, headers = encode_message(blocks, tokenizer_name="tok", tokenizer_hash="h", source=f"s{p}")
            records.append(replay.Record(p, 2 * i + 1, value, headers))  # odd offsets: a marker before each
            all_blocks.append(blocks)
    return records, np.concatenate(all_blocks)


@pytest.fixture
def recording(replay, tmp_path):
    records, blocks = synthetic_records(replay, np.random.default_rng(7))
    path = tmp_path / "segment.bin"
    meta = {"topic": "t", "seq_len": SEQ_LEN, "vocab_size": VOCAB}
    replay.write_recording(path, meta, records)
    return replay.read_recording(path), records, blocks


def test_recording_round_trip(recording):
    rec, records, _ = recording
    assert rec.meta["seq_len"] == SEQ_LEN
    assert [(r.partition, r.offset, bytes(r.value), r.headers) for r in rec.records] == [
        (r.partition, r.offset, bytes(r.value), r.headers) for r in records
    ]
    assert rec.end_offsets() == {0: 6, 1: 4, 2: 8}


@pytest.mark.parametrize("batch_size", [1, 2, 13, 26])
def test_replay_delivers_every_recorded_token(replay, recording, batch_size):
    rec, _, blocks = recording
    assert len(blocks) == 26 and 26 % batch_size == 0
    batches = list(replay.replay_batches(rec, batch_size))
    rows = np.concatenate([b.tensor.numpy() for b in batches])
    assert all(b.tensor.shape == (batch_size, SEQ_LEN) for b in batches)
    pad = sum(b.pad_tokens for b in batches)
    assert pad == 5 and int((rows == -1).sum()) == 5  # padding arrives as -1, counted
    real = blocks.size - int((blocks == PAD_TOKEN).sum())
    assert sum(b.tensor.numel() - b.pad_tokens for b in batches) == real
    # the same rows, in the loader's interleave order rather than the file's
    expected = np.where(blocks == PAD_TOKEN, -1, blocks.astype(np.int64))
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, expected.tolist()))


def test_short_tail_is_dropped_and_passes_repeat(replay, recording):
    rec, _, _ = recording
    batches = list(replay.replay_batches(rec, 5))  # 26 blocks: 5 batches, the last block stays unconsumed
    assert len(batches) == 5
    timed = replay.time_decode(rec, 5, min_seconds=0.0)
    assert timed["passes"] == 1 and timed["tokens"] == 25 * SEQ_LEN - timed["pad_tokens"]
    cycled = replay.cycle_batches(rec, 5)
    assert sum(1 for _ in zip(range(12), cycled, strict=False)) == 12  # pass after pass
    with pytest.raises(ValueError, match="fewer than 27 blocks"):
        next(replay.cycle_batches(rec, 27))


def test_wrong_tokenizer_is_a_dead_letter_not_a_silent_batch(replay, recording):
    from pipeline_project.streaming.errors import DeadLetterLimitError

    rec, _, _ = recording
    with pytest.raises(DeadLetterLimitError):
        list(replay.replay_batches(rec, 1, expected_tokenizer_hash="other"))


def test_the_sharded_path_runs_under_torchrun_and_reports_its_ranks(recording, tmp_path):  # writes segment.bin
    """The CPU smoke of `run --parallelism fsdp` on two gloo ranks: the table and JSON a GPU node would write."""
    import json
    import os
    import subprocess

    out = tmp_path / "gpu.json"
    repo = BENCH.parent
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(BENCH / "gpu_bench.py"), "run", "--device", "cpu", "--preset", "tiny", "--steps", "3",
           "--warmup", "1", "--batch-size", "2", "--parallelism", "fsdp", "--replay-seconds", "0.2",
           "--recording", str(tmp_path / "segment.bin"), "--out", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["parallelism"], result["world_size"]) == ("fsdp", 2)
    assert result["gpu_in_memory"]["tokens_per_s"] > 0 and result["loader_fed"]["measured_steps"] == 2
    assert proc.stdout.count("| a. training from in-memory batches") == 1  # rank 0 alone reports
